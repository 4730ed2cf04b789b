import type { EventPage, ItemResult, StreamIdentity, StreamState } from '../protocol/wire.js';
import type { AttemptClaim, ClaimDecision } from './attempt-claim.js';
import type { CheckedItem, InvalidItem } from './item-check.js';
import type { EventSignal } from './event-signal.js';
import type { IngestScope } from './ingest/steps.js';
import type { TokenRegistry } from './tokens.js';
import type { Catalog } from './catalog/catalog.js';

export { DEFAULT_MAX_ATTEMPT_STEP } from './ingest/steps.js';

export interface EventQuery {
  /** One asset's events. */
  asset?: string | undefined;
  /** Or the events of any of these assets (a token limited to them that named none): never empty. */
  assets?: readonly string[] | undefined;
  /** Return events with a cursor greater than this. */
  after: number;
  limit: number;
}

/** How long the server keeps what, for `compact()`. */
export interface RetentionPolicy {
  /**
   * Age after which a dedupe record may go. It must exceed the longest retry horizon: a retry of a key
   * whose record is gone is stored as a new event.
   */
  dedupeRetentionMs: number;
  /** Age after which a stored event may go; null keeps events forever. */
  eventRetentionMs: number | null;
  /**
   * How long a run's stream state (epoch, sequence numbers, mirrored checkpoints) is kept after the
   * stream's last request. A retry after that starts the stream anew; keep it at least as long as the
   * dedupe records.
   */
  streamRetentionMs: number;
  /** Rows deleted per transaction, so that compaction never holds ingestion up for long. */
  batchSize: number;
}

export interface StoreSizes {
  events: number;
  dedupeRecords: number;
}

export interface CompactionResult {
  dedupeRecords: number;
  events: number;
  /** Recorded stream outcomes (checkpoint updates, rejections, conflicts), which age with the dedupe records. */
  outcomes: number;
  /** Streams idle past their retention, removed with their sequence numbers and checkpoints. */
  streams: number;
}

/**
 * Where the server keeps assets, dedupe records, events and stream state. Each backend runs the whole
 * of `ingest` in one transaction: either every result it returns is durable, or none is.
 */
export interface DedupeStore {
  /** The scoped access tokens kept in this store. */
  readonly tokens: TokenRegistry;
  /** What the store holds, listed for people: GET /v1/catalog/…, `oncebox ls`, the console. */
  readonly catalog: Catalog;
  /** Notified after a commit that stored events (on PostgreSQL, by any instance on the schema). */
  readonly stored: EventSignal;
  /** Ingests one request's items; `scope` is what its token may do inside it (every cause when left out). */
  ingest(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[], scope?: IngestScope): Promise<ItemResult[]>;
  listEvents(query: EventQuery): Promise<EventPage>;
  /** Epoch, sequence numbers and mirrored checkpoints of one stream; undefined when it never delivered. */
  streamState(producer: string, runId: string, task: string | null): Promise<StreamState | undefined>;
  /** The tasks of a run that delivered (null for the run's task-less stream), at most `limit`, in name order. */
  tasksOfRun(producer: string, runId: string, limit: number): Promise<(string | null)[]>;
  /**
   * Claims an attempt of a stream by `decideClaim`, in one atomic step under the stream's lock: a granted
   * attempt becomes the epoch at once, so every lower attempt is fenced, and two claims never get the
   * same number.
   */
  claimAttempt(producer: string, runId: string, task: string | null, claim: AttemptClaim, scope?: Pick<IngestScope, 'openStream'>): Promise<ClaimDecision>;
  registerAsset(name: string): Promise<{ created: boolean }>;
  listAssets(): Promise<string[]>;
  /**
   * How many events and dedupe records the store holds, for the metrics: exact on SQLite, PostgreSQL's
   * planner estimate there (a count of a large table would cost a scan at every scrape).
   */
  sizes(): Promise<StoreSizes>;
  /** Removes dedupe records and events past their retention, in bounded batches. */
  compact(policy: RetentionPolicy): Promise<CompactionResult>;
  close(): Promise<void>;
}
