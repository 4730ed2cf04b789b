import type { FastifyServerOptions } from 'fastify';
import type { OtelApi } from '../protocol/trace.js';
import type { Authenticator } from './auth.js';
import type { CatalogGate } from './catalog/gate.js';
import type { ConnectionLimits } from './connections.js';
import type { LongPollLimits } from './long-polls.js';
import type { ServerMetrics } from './metrics.js';
import type { DedupeStore } from './store.js';

/** What the HTTP app is built from: the store behind it, its auth, and every limit it enforces. */
export interface HttpAppOptions {
  store: DedupeStore;
  auth: Authenticator;
  metrics: ServerMetrics;
  /** OpenTelemetry's API when the application has it: a span per batch ingested. */
  otel?: OtelApi | undefined;
  /** Requests one token may make per window; false for no limit. A server without tokens has none. */
  rateLimit: RateLimit | false;
  /** The proxies whose X-Forwarded-For names the client (`request.ip`); none by default. */
  trustProxy?: string[] | undefined;
  bodyLimit: number;
  maxBatchItems: number;
  /** Bytes of JSON in one page of `GET /v1/events`; a page stops early, and `next` says where to go on. */
  maxPageBytes: number;
  logger: FastifyServerOptions['logger'];
  connections: ConnectionLimits;
  longPolls: LongPollLimits;
  /** New streams one token may open per minute. */
  newStreamsPerMinute: number;
  /** Where the catalog's reads take turns (the routes' and the metrics'); one made for the app when not given. */
  catalogGate?: CatalogGate | undefined;
}

export interface RateLimit {
  max: number;
  windowMs: number;
}
