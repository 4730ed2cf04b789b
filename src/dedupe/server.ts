import type { Registry } from 'prom-client';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { assetNameSchema } from '../protocol/emission.js';
import { InternalError } from '../protocol/errors.js';
import { Limits } from '../protocol/limits.js';
import { resolveOptions } from '../protocol/options.js';
import type { Same } from '../protocol/same-type.js';
import { Authenticator } from './auth.js';
import { loadOtel } from '../protocol/trace.js';
import { buildHttpApp } from './http-app.js';
import { LAG_METRICS_EVERY_MS, MAX_LAG_SERIES, ServerMetrics } from './metrics.js';
import { CachedFigure } from './cached-figure.js';
import { CatalogGate } from './catalog/gate.js';
import { DEFAULT_STALE_RUN_AFTER_MS, MAX_STALE_RUN_AFTER_MS, MIN_STALE_RUN_AFTER_MS, type ConsumerGroup } from '../protocol/catalog.js';
import { openDedupeStore } from './open-store.js';
import { DEFAULT_MAX_LINEAGE_DEPTH, LINEAGE_KEPT } from './ingest/lineage.js';
import { DEFAULT_MAX_ATTEMPT_STEP, type CompactionResult, type DedupeStore, type RetentionPolicy } from './store.js';

const DAY_MS = 24 * 60 * 60 * 1000;
/** @internal Connections open at once unless told otherwise; the CLI's warnings compare against it. */
export const DEFAULT_MAX_CONNECTIONS = 512;
/** Connections one source address may hold at once, by default: a quarter of the server's. */
export const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 128;

/** Validates ServerOptions: each option is documented once, there; `Same` below ties the two. */
const serverOptionsSchema = z.strictObject({
  db: z.string().min(1),
  schema: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]{0,62}$/, { error: 'must be a plain PostgreSQL identifier: letters, digits and _, at most 63' })
    .optional(),
  assets: z.array(assetNameSchema).default([]),
  token: z.string().min(8, { error: 'must be at least 8 characters' }).optional(),
  tokenCacheMs: z.number().int().min(0).max(60_000).default(2000),
  rateLimit: z
    .union([z.literal(false), z.strictObject({ max: z.number().int().min(1), windowMs: z.number().int().min(100) })])
    .default({ max: 1000, windowMs: 10_000 }),
  trustProxy: z.array(z.string().min(1)).min(1).optional(),
  durability: z.enum(['full', 'normal']).default('full'),
  bodyLimit: z.number().int().min(1024).default(Limits.maxBodyBytes),
  maxBatchItems: z.number().int().min(1).max(100_000).default(Limits.maxBatchItems),
  maxAttemptStep: z.number().int().min(1).default(DEFAULT_MAX_ATTEMPT_STEP),
  lineage: z
    .strictObject({
      maxDepth: z.number().int().min(1).max(LINEAGE_KEPT, { error: `must be at most ${LINEAGE_KEPT}: an event keeps its ${LINEAGE_KEPT} nearest ancestors, and the feedback check is exact within them` }).default(DEFAULT_MAX_LINEAGE_DEPTH),
      cycles: z.record(assetNameSchema, z.number().int().min(1).max(10_000)).default({}),
    })
    .default({ maxDepth: DEFAULT_MAX_LINEAGE_DEPTH, cycles: {} }),
  maxPageBytes: z.number().int().min(1024).default(1024 * 1024),
  requestTimeoutMs: z.number().int().min(100).default(30_000),
  headersTimeoutMs: z.number().int().min(100).default(10_000),
  keepAliveTimeoutMs: z.number().int().min(100).default(5_000),
  maxConnections: z.number().int().min(1).default(DEFAULT_MAX_CONNECTIONS),
  maxConnectionsPerAddress: z.number().int().min(0).default(DEFAULT_MAX_CONNECTIONS_PER_ADDRESS),
  unauthenticatedTimeoutMs: z.number().int().min(100).default(5_000),
  maxWaiters: z.number().int().min(1).optional(),
  maxWaitersPerToken: z.number().int().min(1).default(32),
  logger: z.union([z.boolean(), z.record(z.string(), z.unknown())]).default(!!process.env.ONCEBOX_DEBUG),
  dedupeRetentionMs: z.number().int().min(60_000).default(30 * DAY_MS),
  eventRetentionMs: z.number().int().min(60_000).nullable().default(null),
  streamRetentionMs: z.number().int().min(60_000).optional(),
  newStreamsPerMinute: z.number().int().min(1).default(1200),
  staleRunAfterMs: z
    .number()
    .int()
    .min(MIN_STALE_RUN_AFTER_MS, { error: 'must be at least 60000 (one minute)' })
    .max(MAX_STALE_RUN_AFTER_MS, { error: `must be at most ${MAX_STALE_RUN_AFTER_MS} (ten years)` })
    .default(DEFAULT_STALE_RUN_AFTER_MS),
  compactEveryMs: z.number().int().min(0).default(10 * 60_000),
  metricsRegistry: z
    .custom<Registry>((value) => typeof value === 'object' && value !== null && typeof (value as Registry).registerMetric === 'function', {
      error: "must be a prom-client Registry (import { Registry } from 'prom-client')",
    })
    .optional(),
  now: z.custom<() => Date>((value) => typeof value === 'function', { error: 'must be a function returning a Date' }).optional(),
});

/** What `createServer` takes. Every option but `db` has a default. */
export interface ServerOptions {
  /** A SQLite file path, or a postgres:// URL for several instances over one PostgreSQL database. */
  db: string;
  /** The PostgreSQL schema of oncebox's tables: letters, digits and _. @defaultValue 'oncebox' */
  schema?: string | undefined;
  /** Assets to register at start; more can be added with `PUT /v1/assets/:name`. @defaultValue [] */
  assets?: string[] | undefined;
  /**
   * A single admin token, as in earlier versions; scoped tokens (`oncebox token create`) are kept in the
   * store. Once either exists, every request but `/healthz` and `/openapi.json` needs a token. At least 8 characters.
   */
  token?: string | undefined;
  /** How long a token's grant is trusted before the store is asked again: a revocation takes this long to reach other instances. @defaultValue 2000 */
  tokenCacheMs?: number | undefined;
  /** Requests one token may make per window (429 with Retry-After beyond), or false for no limit. @defaultValue { max: 1000, windowMs: 10000 } */
  rateLimit?: false | { max: number; windowMs: number } | undefined;
  /**
   * The proxies in front of the server (addresses or CIDRs) whose X-Forwarded-For names
   * the client, so that requests without a live token are counted per client. @defaultValue unset: the peer's address
   */
  trustProxy?: string[] | undefined;
  /** 'full': every acknowledged batch survives a power cut (SQLite store). @defaultValue 'full' */
  durability?: 'full' | 'normal' | undefined;
  /** Bytes of one request body (413 beyond). @defaultValue 8 MiB */
  bodyLimit?: number | undefined;
  /** Items in one `POST /v1/emissions` (413 beyond). @defaultValue 1000 */
  maxBatchItems?: number | undefined;
  /** How far above a run's highest attempt a new attempt may be (`attempt_too_high` beyond). @defaultValue 1000 */
  maxAttemptStep?: number | undefined;
  /**
   * How deep consumers' chains of emissions may go (`lineage_too_deep` beyond), and which assets may
   * repeat an asset and partition of their own lineage (`feedback_loop` otherwise), each with its own
   * depth limit. @defaultValue { maxDepth: 16, cycles: {} }
   */
  lineage?: { maxDepth?: number | undefined; cycles?: Record<string, number> | undefined } | undefined;
  /** Bytes of JSON in one page of `GET /v1/events`; a page stops early, and `next` says where to go on. @defaultValue 1 MiB */
  maxPageBytes?: number | undefined;
  /** How long a client may take to send a whole request (408 beyond). @defaultValue 30000 */
  requestTimeoutMs?: number | undefined;
  /** How long a client may take to send the request headers (at most requestTimeoutMs). @defaultValue 10000 */
  headersTimeoutMs?: number | undefined;
  /** How long an idle keep-alive connection stays open. @defaultValue 5000 */
  keepAliveTimeoutMs?: number | undefined;
  /** Connections open at once; one past the cap is closed at once. @defaultValue 512 */
  maxConnections?: number | undefined;
  /**
   * Connections one source address may hold at once; one past it is answered 503 and closed, so that one
   * client cannot take the connections of others. 0 for no cap: behind a proxy that connects from one
   * address. @defaultValue 128
   */
  maxConnectionsPerAddress?: number | undefined;
  /**
   * How long a connection may stay open before one of its requests presents a live token (a request with
   * none is answered at once): half-sent requests without one are closed then (408), and hold no
   * publisher's connection for longer. @defaultValue 5000
   */
  unauthenticatedTimeoutMs?: number | undefined;
  /**
   * Waiting reads (`GET /v1/events?wait=`) this instance holds at once (`503 overloaded` beyond), so that
   * idle readers leave connections for publishers. @defaultValue half of maxConnections
   */
  maxWaiters?: number | undefined;
  /** Waiting reads one token may hold at once (`429 rate_limited` beyond). @defaultValue 32 */
  maxWaitersPerToken?: number | undefined;
  /** Fastify's logger setting (true, false, or pino options). @defaultValue false, unless ONCEBOX_DEBUG is set */
  logger?: boolean | Record<string, unknown> | undefined;
  /** How long dedupe records are kept: longer than the longest retry horizon. @defaultValue 30 days */
  dedupeRetentionMs?: number | undefined;
  /**
   * How long a run with no lifecycle end may go without a request before the catalog and console show it
   * stale rather than running (its job died unheard, or never calls complete()). @defaultValue 24 hours
   */
  staleRunAfterMs?: number | undefined;
  /** How long events are kept; null keeps them forever. @defaultValue null */
  eventRetentionMs?: number | null | undefined;
  /**
   * How long a run's stream state (epoch, sequence numbers, mirrored checkpoints) is kept after its last
   * request; a retry after that starts the stream anew. Keep it at least as long as the dedupe records.
   * @defaultValue dedupeRetentionMs
   */
  streamRetentionMs?: number | undefined;
  /**
   * New streams (runs) one token may open per minute on this instance; beyond, the request that would
   * open one is answered `429 rate_limited` with Retry-After. @defaultValue 1200
   */
  newStreamsPerMinute?: number | undefined;
  /** How often compaction runs; 0 turns it off. @defaultValue 10 minutes */
  compactEveryMs?: number | undefined;
  /** The prom-client registry behind `GET /metrics`. @defaultValue a registry of its own */
  metricsRegistry?: Registry | undefined;
  /** The store's clock; for tests. */
  now?: (() => Date) | undefined;
}
const serverOptionsAreDocumented: Same<ServerOptions, z.input<typeof serverOptionsSchema>> = true;
void serverOptionsAreDocumented;

export interface OnceboxServer {
  readonly app: FastifyInstance;
  readonly store: DedupeStore;
  /** Starts listening (loopback by default) and resolves to the base URL, e.g. http://127.0.0.1:8787. */
  listen(options?: { port?: number; host?: string }): Promise<string>;
  /** Stops taking requests, lets those in flight finish, then closes the store. */
  close(): Promise<void>;
  /** The prom-client registry behind `GET /metrics`. */
  readonly metrics: Registry;
  /** Runs compaction now, with the server's retention settings. */
  compact(): Promise<CompactionResult>;
}

/**
 * Opens the store, registers the assets, builds the HTTP app and starts compaction. It is long because
 * it wires the server once, in order: the store, the metrics, the HTTP app, the compaction and the
 * listener, each a few lines; split, the order they must start and stop in would part.
 */
export async function createServer(options: ServerOptions): Promise<OnceboxServer> {
  const resolved = resolveOptions(serverOptionsSchema, options, 'createServer');
  const store = await openDedupeStore({
    ...resolved,
    lineage: { maxDepth: resolved.lineage.maxDepth, cycles: new Map(Object.entries(resolved.lineage.cycles)) },
  });
  for (const asset of resolved.assets) await store.registerAsset(asset);
  const catalogGate = new CatalogGate();
  // Every group's lag, page by page: computed at most every LAG_METRICS_EVERY_MS however often scraped,
  // each page taking its turn with the catalog's other readers.
  const lags = new CachedFigure(async () => {
    const groups: ConsumerGroup[] = [];
    let after: string | undefined;
    do {
      const page = await catalogGate.run('metrics', () => store.catalog.consumers({ limit: MAX_LAG_SERIES, ...(after === undefined ? {} : { after }) }, { assets: null, producers: '*' }));
      groups.push(...page.items);
      after = page.next ?? undefined;
    } while (after !== undefined && groups.length < MAX_LAG_SERIES);
    return groups.slice(0, MAX_LAG_SERIES);
  }, LAG_METRICS_EVERY_MS);
  const metrics = new ServerMetrics(resolved.metricsRegistry, {
    sizes: () => store.sizes(),
    waiting: () => store.stored.waiting,
    consumers: async () => (await lags.get()) ?? [],
  });
  const app = buildHttpApp({
    store,
    auth: new Authenticator({ legacyToken: resolved.token, tokens: store.tokens, cacheMs: resolved.tokenCacheMs }),
    rateLimit: resolved.rateLimit,
    trustProxy: resolved.trustProxy,
    metrics,
    otel: await loadOtel(),
    bodyLimit: resolved.bodyLimit,
    maxBatchItems: resolved.maxBatchItems,
    maxPageBytes: resolved.maxPageBytes,
    logger: resolved.logger,
    connections: {
      requestTimeoutMs: resolved.requestTimeoutMs,
      headersTimeoutMs: Math.min(resolved.headersTimeoutMs, resolved.requestTimeoutMs),
      keepAliveTimeoutMs: resolved.keepAliveTimeoutMs,
      maxConnections: resolved.maxConnections,
      maxConnectionsPerAddress: resolved.maxConnectionsPerAddress,
      unauthenticatedTimeoutMs: resolved.unauthenticatedTimeoutMs,
    },
    newStreamsPerMinute: resolved.newStreamsPerMinute,
    catalogGate,
    longPolls: { maxWaiters: resolved.maxWaiters ?? Math.max(1, Math.floor(resolved.maxConnections / 2)), maxWaitersPerToken: resolved.maxWaitersPerToken },
  });
  const retention: RetentionPolicy = {
    dedupeRetentionMs: resolved.dedupeRetentionMs,
    eventRetentionMs: resolved.eventRetentionMs,
    streamRetentionMs: resolved.streamRetentionMs ?? resolved.dedupeRetentionMs,
    batchSize: 1000,
  };
  const compactor =
    resolved.compactEveryMs > 0
      ? setInterval(() => {
          store
            .compact(retention)
            .then((result) => metrics.compactedRows(result))
            .catch((error: unknown) => app.log.error({ err: error }, 'compaction failed'));
        }, resolved.compactEveryMs).unref()
      : undefined;
  let closed: Promise<void> | undefined;
  return {
    async compact() {
      const result = await store.compact(retention);
      metrics.compactedRows(result);
      return result;
    },
    metrics: metrics.registry,
    app,
    store,
    async listen({ port = 0, host = '127.0.0.1' } = {}) {
      await app.listen({ port, host });
      const address = app.server.address();
      if (address === null || typeof address === 'string') throw new InternalError('the server is listening on a pipe, not on TCP; it has no URL');
      const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      return `http://${shownHost}:${address.port}`;
    },
    close() {
      clearInterval(compactor);
      // Waiting readers answer first: the app's close waits for every request in flight.
      store.stored.close();
      closed ??= app.close().then(() => store.close());
      return closed;
    },
  };
}
