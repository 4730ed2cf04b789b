import { z } from 'zod';
import { assetNameSchema } from './emission.js';
import { RejectionCode } from './errors.js';
import { plainText } from './text.js';
import { nameSchema, storedEventSchema } from './wire.js';

/**
 * The catalog: what the server holds, listed for people (`GET /v1/catalog/…`, `oncebox ls`, the web
 * console). Each answer's type is inferred from its schema here, which the OpenAPI document is built from.
 */

/** The checkpoint a consumer group keeps its cursor in (the catalog lists such streams as consumer groups). */
export const CONSUMER_CURSOR_CHECKPOINT = 'oncebox.cursor';
/** The checkpoint that names the assets a group consumes, for its lag. */
export const CONSUMER_ASSETS_CHECKPOINT = 'oncebox.assets';

/** The most items a catalog page may be asked for (`limit`). */
export const CATALOG_MAX_LIMIT = 1000;
/** The most items a catalog page holds, whatever its `limit`: `next` goes on from there. */
export const CATALOG_PAGE_ROWS = 200;
/** The most consumer groups a page holds (each costs a count per asset). */
export const CONSUMER_PAGE_ROWS = 50;
/** Characters of a checkpoint's JSON a list of streams shows; a longer value is cut, and whole on the stream's page. */
export const CHECKPOINT_PREVIEW_CHARS = 1000;
/** How far a consumer group's lag is counted; past it the count stops and `lagCapped` says so. */
export const LAG_COUNT_CAP = 1_000_000;

const timestamp = z.iso.datetime();
/** A time a client filters by: with any offset (`+02:00`) or none (UTC), as emissions' times are. */
const sinceTime = z.iso.datetime({ offset: true, local: true });
const count = z.number().int().min(0);

const pageQuery = {
  after: z
    .string()
    .max(4096)
    .regex(/^[A-Za-z0-9_-]*$/, { error: 'must be a page cursor as the server gave it (base64url)' })
    .optional()
    .describe("The previous page's `next`, to go on from; left out for the first page. Opaque: pass it back as it came."),
  limit: z.coerce
    .number()
    .int()
    .min(1)
    .max(CATALOG_MAX_LIMIT)
    .default(100)
    .describe(`The most items to answer: at most ${CATALOG_PAGE_ROWS} are (${CONSUMER_PAGE_ROWS} consumer groups), fewer when the page would pass 1 MiB; follow \`next\` for the rest.`),
};

/** A page of a list: `next` goes back as `after` for the following page, null on the last. */
export function pageSchema<Item extends z.ZodType>(item: Item) {
  return z.object({
    items: z.array(item),
    next: z.string().nullable().describe('Pass as `after` for the next page; null when this is the last.'),
  });
}
export interface Page<Item> {
  items: Item[];
  next: string | null;
}

/** An event in a list: which one, when, and which run and attempt produced it. */
export const eventRefSchema = storedEventSchema.pick({
  cursor: true,
  eventId: true,
  timestamp: true,
  producer: true,
  workflow: true,
  runId: true,
  task: true,
  attempt: true,
});
export type EventRef = z.infer<typeof eventRefSchema>;

export const assetSummarySchema = z.object({
  name: z.string(),
  registered: z.boolean().describe('Registered on the server; the lifecycle assets (oncebox.run_*) are known without.'),
  events: count.describe('Events the server holds of this asset.'),
  partitions: count.describe('Distinct partition keys among them.'),
  duplicates: count.describe("Retried deliveries of this asset's events the server absorbed as duplicates."),
  lastEvent: eventRefSchema.nullable(),
});
export type AssetSummary = z.infer<typeof assetSummarySchema>;

export const assetQuerySchema = z.strictObject({
  ...pageQuery,
  prefix: plainText(z.string().max(200)).optional().describe('Only assets whose name starts with this.'),
});

/**
 * - `published`: one event, no retry of it seen;
 * - `deduplicated`: one event, and the server absorbed retried deliveries of it as duplicates;
 * - `republished`: more than one event (a re-run emitted it again under new keys).
 */
export const partitionStateSchema = z.enum(['published', 'deduplicated', 'republished']);
export type PartitionState = z.infer<typeof partitionStateSchema>;

export const partitionSummarySchema = z.object({
  partitionKey: z.string(),
  partitionDate: z.string().nullable(),
  state: partitionStateSchema,
  events: count.describe('Events of this partition (more than one: emitted again under new keys).'),
  duplicates: count.describe('Retried deliveries of its events absorbed as duplicates.'),
  event: eventRefSchema.describe('The newest event of the partition.'),
});
export type PartitionSummary = z.infer<typeof partitionSummarySchema>;

export const partitionQuerySchema = z.strictObject({
  ...pageQuery,
  prefix: plainText(z.string().max(200)).optional().describe('Only partition keys that start with this (such as 2026-11).'),
});
export const partitionParamsSchema = z.strictObject({ asset: assetNameSchema });

export const partitionPageSchema = pageSchema(partitionSummarySchema).extend({ asset: assetSummarySchema });
export type PartitionPage = z.infer<typeof partitionPageSchema>;

export const attemptSummarySchema = z.object({
  attempt: z.number().int(),
  lastSeq: count.describe('The last sequence number it took; 0 if it delivered nothing before it was fenced.'),
  firstAt: timestamp.nullable().describe('When it first delivered.'),
  lastAt: timestamp.nullable().describe('When it last delivered.'),
  duplicates: count.describe('Its deliveries the server answered as duplicates (a retry absorbed).'),
  fencedItems: count.describe('Items it sent after a later attempt had delivered, refused as fenced (a zombie stopped).'),
  fencedBy: z.number().int().nullable().describe('The attempt that fenced it; null for the stream\'s current attempt.'),
});
export type AttemptSummary = z.infer<typeof attemptSummarySchema>;

/** How long a run may go without a request and no lifecycle end before it is shown stale, by default. */
export const DEFAULT_STALE_RUN_AFTER_MS = 24 * 3600_000;
/** The bounds of that time: a minute, and ten years (beyond, the time it marks would be no date). */
export const MIN_STALE_RUN_AFTER_MS = 60_000;
export const MAX_STALE_RUN_AFTER_MS = 3650 * 24 * 3600_000;

export const streamOutcomeSchema = z
  .enum(['running', 'stale', 'succeeded', 'failed'])
  .describe(
    "From the run's lifecycle events: running until box.complete() or a final box.fail(); stale when a run without either has " +
      "made no request for the server's staleRunAfterMs (24 hours by default): its job died unheard, or never ends its runs.",
  );
export type StreamOutcome = z.infer<typeof streamOutcomeSchema>;

export const streamSummarySchema = z.object({
  producer: z.string(),
  runId: z.string(),
  task: z.string().nullable(),
  kind: z.enum(['run', 'consumer']).describe('A consumer group keeps its cursor as the checkpoint oncebox.cursor.'),
  epoch: z.number().int().describe('The current attempt; every lower one is fenced.'),
  lastSeq: count.describe("The current attempt's last sequence number."),
  attempts: z.array(attemptSummarySchema).describe('The attempts that delivered or were fenced, of the latest 100 numbers up to the epoch.'),
  attemptsCut: z.boolean().describe('Attempts more than 100 below the epoch delivered or were fenced too, and are not listed (a run whose attempts jumped).'),
  fencedAttempts: z.array(z.number().int()).describe('Attempts below the epoch that delivered, or tried to.'),
  duplicates: count,
  checkpoints: z
    .record(z.string(), z.unknown())
    .describe(`The mirrored checkpoints, by name. In a list, a value longer than ${CHECKPOINT_PREVIEW_CHARS} characters as JSON is its JSON cut there and ended with …, and named in cutCheckpoints.`),
  cutCheckpoints: z.array(z.string()).describe("The checkpoints this answer shows cut; the stream's own page (GET /v1/catalog/streams/{producer}/{runId}) has them whole."),
  outcome: streamOutcomeSchema,
  willRetry: z.boolean().describe('An attempt failed with a retry to come (the outcome stays running).'),
  lastDeliveryAt: timestamp,
});
export type StreamSummary = z.infer<typeof streamSummarySchema>;

export const streamListQuerySchema = z.strictObject({
  ...pageQuery,
  producer: nameSchema.optional(),
  runId: nameSchema.optional(),
  kind: z.enum(['run', 'consumer']).optional(),
  outcome: streamOutcomeSchema.optional(),
});

export const rejectionSchema = z.object({
  producer: z.string(),
  runId: z.string(),
  task: z.string().nullable(),
  attempt: z.number().int(),
  seq: z.number().int(),
  key: z.string(),
  status: z.enum(['rejected', 'conflict']),
  code: z.enum(Object.values(RejectionCode) as [RejectionCode, ...RejectionCode[]]),
  detail: z.string(),
  field: z.string().nullable(),
  asset: z.string().nullable(),
  partitionKey: z.string().nullable(),
  at: timestamp,
  fix: z.string().describe('What fixes it; the refused row waits dead in the job\'s outbox file until `oncebox dead retry`.'),
});
export type Rejection = z.infer<typeof rejectionSchema>;

export const rejectionQuerySchema = z.strictObject({
  ...pageQuery,
  producer: nameSchema.optional(),
  runId: nameSchema.optional(),
  code: z.enum(Object.values(RejectionCode) as [RejectionCode, ...RejectionCode[]]).optional(),
  since: sinceTime.optional().describe('Only refusals at or after this time (an ISO time; UTC when it gives no offset).'),
});

export const streamDetailSchema = streamSummarySchema.extend({
  lifecycle: z.array(storedEventSchema).describe("The run's lifecycle events (oncebox.run_*): successes, failures with their held emissions, fences; the newest 200."),
  rejections: z.array(rejectionSchema).describe("The run's newest refusals (at most 50)."),
});
export type StreamDetail = z.infer<typeof streamDetailSchema>;

export const streamDetailQuerySchema = z.strictObject({ task: nameSchema.optional() });

export const consumerGroupSchema = z.object({
  producer: z.string(),
  group: z.string(),
  epoch: z.number().int(),
  cursor: count.describe('The last event the group consumed, as its cursor mirror holds it.'),
  assets: z.array(z.string()).nullable().describe('The assets it consumes; null for a consumer of a version that did not say.'),
  newestCursor: count.nullable().describe("The newest event of those assets (of those the reader's token reads events of); null when it reads none."),
  lag: count
    .nullable()
    .describe("Events of its assets after its cursor, counted over the assets the reader's token reads events of; null when it reads none of them, or the group names more assets than a group may."),
  lagCapped: z.boolean().describe(`The lag was counted up to ${LAG_COUNT_CAP} and stopped.`),
  lastFetchAt: timestamp.nullable().describe('When it last read events (recorded at most every few seconds).'),
  lastDeliveryAt: timestamp.describe('When its cursor mirror or emissions last reached the server.'),
});
export type ConsumerGroup = z.infer<typeof consumerGroupSchema>;

/** The overview takes no query. */
export const overviewQuerySchema = z.strictObject({});

export const consumerQuerySchema = z.strictObject({ ...pageQuery, producer: nameSchema.optional() });

export const overviewSchema = z.object({
  assets: pageSchema(assetSummarySchema),
  running: pageSchema(streamSummarySchema).describe('Runs in progress, newest delivery first.'),
  stale: pageSchema(streamSummarySchema).describe('Runs with no end and no request for staleRunAfterMs, newest delivery first.'),
  staleRunAfterMs: count.describe("The server's stale time: how long a run without an end may make no request before it is shown stale."),
  consumers: pageSchema(consumerGroupSchema),
  rejections: z.object({ lastDay: count, recent: z.array(rejectionSchema) }),
  newestCursor: count.describe('The newest event the token may read: a console long-polls GET /v1/events?after= it for live updates.'),
  at: timestamp,
});
export type Overview = z.infer<typeof overviewSchema>;
