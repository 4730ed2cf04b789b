import { z } from 'zod';
import { loggerSchema, type OutboxLogger } from '../client/logger.js';
import { serversSchema } from '../client/server-urls.js';
import { assetNameSchema } from '../protocol/emission.js';
import { Limits } from '../protocol/limits.js';
import type { Same } from '../protocol/same-type.js';
import { nameSchema } from '../protocol/wire.js';

/** Validates ConsumerOptions: each option is documented once, there; `Same` below ties the two. */
export const consumerOptionsSchema = z.strictObject({
  path: z.string().min(1),
  server: serversSchema,
  group: nameSchema,
  assets: z
    .array(assetNameSchema)
    .min(1, { error: 'must list at least one asset to consume' })
    .refine((assets) => new Set(assets).size <= Limits.maxGroupAssets, {
      error: `must list at most ${Limits.maxGroupAssets} assets: the server counts a group's lag over each; split the work between groups`,
    }),
  producer: nameSchema.optional(),
  token: z.string().min(1).optional(),
  readToken: z.string().min(1).optional(),
  batchSize: z.number().int().min(1).max(1000).default(100),
  waitSeconds: z.number().min(0.1).max(30).default(10),
  durability: z.enum(['full', 'normal']).default('full'),
  requestTimeoutMs: z.number().int().min(1).default(10_000),
  resumeTimeoutMs: z.number().int().min(0).default(30_000),
  retryMaxDelayMs: z.number().int().min(1).default(5_000),
  relay: z
    .strictObject({ batchMaxRows: z.number().int().min(1).max(1000).optional(), maxInFlight: z.number().int().min(1).max(64).optional() })
    .default({}),
  logger: loggerSchema.optional(),
});

/** What `openConsumer` takes. */
export interface ConsumerOptions {
  /** The consumer's SQLite file: its cursor, the events it processed, your tables, and its outbox. Created if missing. */
  path: string;
  /** The oncebox server, or several instances over one PostgreSQL database. */
  server: string | string[];
  /** The consumer group: one cursor, one stream on the server, one live consumer at a time (the others are fenced). */
  group: string;
  /** The assets to consume, in cursor order across them: at most 100 (the server counts the group's lag over each). */
  assets: string[];
  /** The producer name of the group's emissions and cursor mirror. @defaultValue the group */
  producer?: string | undefined;
  /**
   * A publish token of the producer: for the cursor mirror, the epoch claim and emissions.
   * @defaultValue the ONCEBOX_TOKEN environment variable, when set
   */
  token?: string | undefined;
  /** A read token with reads "events", when `token` cannot read events. @defaultValue token */
  readToken?: string | undefined;
  /** Events per fetch, and per handler call with `batch: true`. @defaultValue 100 */
  batchSize?: number | undefined;
  /** How long one long-poll waits for a new event, in seconds (at most 30). @defaultValue 10 */
  waitSeconds?: number | undefined;
  /** 'full' fsyncs every commit. @defaultValue 'full' */
  durability?: 'full' | 'normal' | undefined;
  /** @defaultValue 10000 */
  requestTimeoutMs?: number | undefined;
  /** How long a consumer starting on a fresh file keeps trying to read its mirrored cursor. @defaultValue 30000 */
  resumeTimeoutMs?: number | undefined;
  /** The longest pause between fetches while the server is unreachable. @defaultValue 5000 */
  retryMaxDelayMs?: number | undefined;
  /** How the relay delivers emissions and cursor updates: rows per request, requests in flight. @defaultValue 500 rows, 4 in flight */
  relay?: { batchMaxRows?: number | undefined; maxInFlight?: number | undefined } | undefined;
  /** Where the consumer logs what you must act on (the server unreachable, a fence). @defaultValue JSON lines on stderr */
  logger?: OutboxLogger | undefined;
}
const consumerOptionsAreDocumented: Same<ConsumerOptions, z.input<typeof consumerOptionsSchema>> = true;
void consumerOptionsAreDocumented;

/** @internal ConsumerOptions with their defaults. */
export type ResolvedConsumerOptions = z.output<typeof consumerOptionsSchema>;
