import type { ColumnType } from 'kysely';
import type { TraceContext } from '../protocol/trace.js';
import type { StoredEvent, StreamIdentity } from '../protocol/wire.js';
import type { RecordedStatus } from './ingest/resolve.js';
import { ancestorOf, LINEAGE_KEPT, type Ancestor, type CauseEvent, type EventLineage } from './ingest/lineage.js';

/** One stream (producer, run, task) as both stores key it: a stream without a task is kept under '', since NULL never equals NULL in a key. */
export interface OfStream {
  producer: string;
  runId: string;
  task: string;
}

/** One attempt of a stream, as both stores key it. */
export interface OfAttempt extends OfStream {
  attempt: number;
}

/** A stream as both stores key it, from its wire form (task null for none): the one place that turns one into the other. */
export function streamOf(producer: string, runId: string, task: string | null): OfStream {
  return { producer, runId, task: task ?? '' };
}

export function attemptOf(stream: StreamIdentity): OfAttempt {
  return { ...streamOf(stream.producer, stream.runId, stream.task), attempt: stream.attempt };
}

/** An events row as both stores hold it (column names are the same in SQLite and PostgreSQL). */
export interface EventRow {
  cursor: number;
  event_id: string;
  key: string;
  ts: string;
  asset: string;
  partition_key: string | null;
  partition_date: string | null;
  extra: string | null;
  producer: string;
  workflow: string;
  run_id: string;
  task: string | null;
  attempt: number;
  seq: number;
  /** The W3C trace context the emission was committed in, as JSON; null when it had none. */
  trace_context: string | null;
  /** The id of the event this one responds to; null for a producer's own. */
  caused_by: string | null;
  depth: number;
  /** The asset and partition of every event above this one, as JSON; null for a producer's own. */
  lineage: string | null;
}

/** A column with a default: read as T, optional on insert. */
type ColumnDefault<T> = ColumnType<T, T | undefined, T>;

/** A run's outcome as `streams.outcome` keeps it (NULL while running). */
export type StoredRunOutcome = 'succeeded' | 'failed' | 'retrying';

/** What a request's lifecycle events say of its run, and the attempt that says it. */
export interface RunOutcome {
  outcome: StoredRunOutcome;
  attempt: number;
}

/** The tables both stores share, column for column; each adds its own `events` (and PostgreSQL its sequencer). */
export interface SharedTables {
  assets: { name: string; created_at: string };
  dedupe: { producer: string; key: string; fingerprint: string; event_id: string; ts: string; created_at: number; duplicates: ColumnDefault<number> };
  streams: {
    producer: string;
    run_id: string;
    task: string;
    epoch: number;
    updated_at: string;
    /** NULL while running; from the stream's lifecycle events. */
    outcome: ColumnDefault<StoredRunOutcome | null>;
    /** The attempt whose lifecycle event set `outcome` (0 for none): an earlier attempt's never overwrites it. */
    outcome_attempt: ColumnDefault<number>;
    /** When the consumer group of this stream last read events. */
    fetched_at: ColumnDefault<string | null>;
  };
  stream_seqs: {
    producer: string;
    run_id: string;
    task: string;
    attempt: number;
    last_seq: number;
    first_at: ColumnDefault<string | null>;
    last_at: ColumnDefault<string | null>;
    duplicates: ColumnDefault<number>;
  };
  stream_fences: { producer: string; run_id: string; task: string; attempt: number; fenced_by: number; items: number; last_at: string };
  /**
   * Per asset, counted by the catalog's rollup up to `rollup_position.up_to`: events stored (lowered by
   * retention), distinct partitions, duplicates absorbed (raised by the ingest), and the ordinal of its
   * newest event (every event counted once, in cursor order, never lowered).
   */
  asset_rollup: { asset: string; events: ColumnDefault<number>; partitions: ColumnDefault<number>; duplicates: ColumnDefault<number>; ordinal: ColumnDefault<number> };
  /** Every MARK_EVERY-th event of an asset by ordinal, with its cursor: where a lag count starts. */
  asset_marks: { asset: string; cursor: number; ordinal: number };
  rollup_position: { id: number; up_to: number };
  stream_outcomes: {
    producer: string;
    run_id: string;
    task: string;
    attempt: number;
    seq: number;
    key: string;
    status: RecordedStatus;
    code: string;
    detail: string;
    field: string | null;
    created_at: number;
    asset: ColumnDefault<string | null>;
    partition_key: ColumnDefault<string | null>;
  };
  /** Refusals that hold no position: `sequence_reused` (another key holds it) and `attempt_too_high` (a request refused whole). */
  stream_refusals: SharedTables['stream_outcomes'];
  stream_checkpoints: {
    producer: string;
    run_id: string;
    task: string;
    name: string;
    value: string;
    attempt: number;
    seq: number;
    updated_at: string;
    revision: number;
  };
}

export function toStoredEvent(row: EventRow): StoredEvent {
  return {
    cursor: Number(row.cursor),
    eventId: row.event_id,
    timestamp: row.ts,
    key: row.key,
    asset: row.asset,
    partitionKey: row.partition_key,
    partitionDate: row.partition_date,
    extra: row.extra === null ? null : JSON.parse(row.extra),
    producer: row.producer,
    workflow: row.workflow,
    runId: row.run_id,
    task: row.task,
    attempt: row.attempt,
    seq: Number(row.seq),
    trace: row.trace_context === null ? null : (JSON.parse(row.trace_context) as TraceContext),
    causedBy: row.caused_by,
    depth: row.depth,
  };
}

/** An events row as a cause of a new event. */
export function toCauseEvent(row: Pick<EventRow, 'event_id' | 'asset' | 'partition_key' | 'depth' | 'lineage'>): CauseEvent {
  return {
    eventId: row.event_id,
    asset: row.asset,
    partitionKey: row.partition_key,
    depth: Number(row.depth),
    ancestors: row.lineage === null ? [] : keptAncestors(JSON.parse(row.lineage) as unknown[]),
  };
}

/**
 * The ancestors a stored lineage holds: digests, or, in a row stored before lineage was kept as
 * digests, [asset, partition key] pairs, which become digests as they are read.
 */
function keptAncestors(stored: readonly unknown[]): Ancestor[] {
  return stored.map((entry) => (typeof entry === 'string' ? entry : ancestorOf(...(entry as [string, string | null])))).slice(-LINEAGE_KEPT);
}

/** The lineage columns of a new event. */
export function lineageColumns(lineage: EventLineage): { causedBy: string | null; depth: number; lineage: string | null } {
  return {
    causedBy: lineage.causedBy,
    depth: lineage.depth,
    lineage: lineage.ancestors.length === 0 ? null : JSON.stringify(lineage.ancestors),
  };
}

/**
 * Deletes in batches of `batchSize` until a batch comes back short, each batch its own statement (and
 * transaction), so that a long compaction never holds writers up for more than one batch.
 * @returns how many rows it deleted.
 */
export async function deleteInBatches(batchSize: number, deleteBatch: () => Promise<number> | number): Promise<number> {
  let total = 0;
  for (;;) {
    const deleted = await deleteBatch();
    total += deleted;
    if (deleted < batchSize) return total;
  }
}

/** How many of these rows name each asset. */
export function countsByAsset(rows: readonly { asset: string }[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const { asset } of rows) counts.set(asset, (counts.get(asset) ?? 0) + 1);
  return counts;
}
