import type { StreamIdentity } from '../../protocol/wire.js';
import type { KeyClaim } from '../ingest/resolve.js';
import type { IngestClock } from '../ingest/steps.js';
import { lineageColumns } from '../tables.js';
import type { KeyPlace } from '../key-places.js';

/**
 * The events row a claim inserts in the embedded store: the event and its dedupe record in one (its
 * fingerprint, and when its key entered the dedupe window; migration 012), its key filed at `filedAt` (013).
 */
export interface ClaimedEventRow {
  eventId: string;
  key: string;
  ts: string;
  asset: string;
  partitionKey: string | null;
  partitionDate: string | null;
  extra: string | null;
  producer: string;
  workflow: string;
  runId: string;
  taskOrNull: string | null;
  attempt: number;
  seq: number;
  traceContext: string | null;
  causedBy: string | null;
  depth: number;
  lineage: string | null;
  fingerprint: string;
  createdAt: number;
  /** Where the key is filed in the key index (key-places.ts): its run's slot, or 0. */
  runSlot: number;
  /** With runSlot: the partition it is filed under, or ''. */
  filedPartition: string;
}

/** The events row of a claimed key of `stream`, stored at `clock`, its key filed at `filedAt`. */
export function claimedEventRow(stream: StreamIdentity, claim: KeyClaim, clock: IngestClock, filedAt: KeyPlace): ClaimedEventRow {
  const { item, lineage } = claim.event;
  return {
    runSlot: filedAt.slot,
    filedPartition: filedAt.partition,
    producer: stream.producer,
    workflow: stream.workflow,
    runId: stream.runId,
    taskOrNull: stream.task,
    attempt: stream.attempt,
    seq: item.seq,
    eventId: claim.eventId,
    key: item.key,
    ts: clock.ts,
    asset: item.payload.asset,
    partitionKey: item.payload.partitionKey ?? null,
    partitionDate: item.payload.partitionDate ?? null,
    extra: item.payload.extra ?? null,
    // Stryker disable next-line ConditionalExpression: better-sqlite3 binds undefined as NULL too
    traceContext: item.trace === undefined ? null : JSON.stringify(item.trace),
    ...lineageColumns(lineage),
    fingerprint: claim.fingerprint,
    createdAt: clock.ms,
  };
}
