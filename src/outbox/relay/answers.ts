import { FencedError, ProducerErrorCode, StreamStateLostError } from '../../protocol/errors.js';
import type { ItemResult, StreamIdentity } from '../../protocol/wire.js';
import type { OutboxFile } from '../file/outbox-file.js';
import type { OutboxRow } from '../file/schema.js';
import type { SettledRow } from '../events.js';
import { DeliveryError } from '../../client/server-client.js';
import { wireTask, type Fence } from '../run.js';

/** What the server's answers to one batch did to the batch's rows. */
export interface AppliedAnswers {
  /** Rows now delivered or dead, with what their receipt promises need. */
  settled: SettledRow[];
  /** Rows marked, checkpoint updates included. */
  marked: number;
  /**
   * Rows that changed while the request was in flight: taken over by a newer attempt (which delivers
   * them as its own), or a checkpoint update rewritten by a newer commit (sent again at its revision).
   */
  movedAway: number;
  /** The fence the server answered with, if it did. */
  fence: Fence | undefined;
}

/**
 * Marks each row of a batch with the server's answer for its key: the relay's handling of answers. Runs
 * inside the relay's transaction, after it has proved it still holds the lease. A row is marked only
 * while it is still where it was sent from (its attempt and sequence number), and only with the
 * server's receipt for its key: a gap, a fence or an item the server could not place marks nothing.
 * A fence parks every pending row of the fenced attempt and records the fence in the file.
 * @internal
 */
export function applyAnswers(file: OutboxFile, rows: readonly OutboxRow[], results: readonly ItemResult[], now: number): AppliedAnswers {
  const s = file.rows;
  const applied: AppliedAnswers = { settled: [], marked: 0, movedAway: 0, fence: undefined };
  const mark = (row: OutboxRow, changes: number): boolean => {
    applied.marked += changes;
    // A row the mark did not change is settled already, or changed in flight: taken over by another
    // attempt, or rewritten to a newer revision.
    // Stryker disable next-line ConditionalExpression: a row just marked is where it was sent from, at its revision
    if (changes === 0) {
      const current = s.rowById.get({ id: row.id });
      // Stryker disable next-line OptionalChaining: a row is never deleted while pending
      if (current?.attempt !== row.attempt || current.revision !== row.revision) applied.movedAway++;
    }
    return changes === 1;
  };
  results.forEach((result, index) => {
    const row = rows[index]!;
    if (result.key !== row.key && result.key !== null) {
      throw new DeliveryError('bad_response', `result ${index} is for key ${result.key}, not ${row.key}`);
    }
    const sent = { id: row.id, attempt: row.attempt, seq: row.seq, revision: row.revision, now };
    switch (result.status) {
      case 'accepted':
      case 'duplicate': {
        const duplicate = result.status === 'duplicate';
        const receipt = { eventId: result.eventId, timestamp: result.timestamp, duplicate: duplicate ? 1 : 0 };
        if (mark(row, s.markDelivered.run({ ...sent, ...receipt }).changes)) {
          applied.settled.push({ id: row.id, state: 'delivered', key: row.key, eventId: result.eventId, timestamp: result.timestamp, duplicate, committedAt: row.committed_at });
        }
        break;
      }
      case 'rejected':
      case 'conflict':
        // Without a seq the server could not place the item: nothing is known about this row.
        if (result.seq === null) break;
        if (mark(row, s.markDead.run({ ...sent, code: result.code, reason: result.detail }).changes)) {
          applied.settled.push({ id: row.id, state: 'dead', key: row.key, code: result.code, reason: result.detail });
        }
        break;
      case 'checkpointed':
        mark(row, s.markDelivered.run({ ...sent, eventId: null, timestamp: null, duplicate: null }).changes);
        break;
      case 'fenced':
        applied.fence ??= { runId: row.run_id, task: wireTask(row.task), attempt: row.attempt, by: result.epoch };
        break;
      // A gap marks nothing: the row is resent, or the relay stops (afterAnswers).
    }
  });
  const { fence } = applied;
  if (fence) {
    const { parked, reason } = file.runs.parkFenced(fence, now);
    for (const id of parked) applied.settled.push({ id, state: 'dead', key: '', code: ProducerErrorCode.Fenced, reason, fence });
  }
  return applied;
}

/**
 * What the relay does after applying a batch's answers: goes on (returning how many rows were marked),
 * or throws what stops or delays it. A fence ends this attempt's delivery; a gap before rows the outbox
 * already settled means the server lost them (its store was reset or restored), and resending out of
 * order would break the stream; any other gap, or an answer that settled nothing, is retried with backoff.
 * @internal
 */
export function afterAnswers(
  stream: StreamIdentity,
  batch: readonly OutboxRow[],
  results: readonly ItemResult[],
  applied: AppliedAnswers,
  /** The seq of the first row sent at once with this batch: every row before it was settled before sending. */
  sentFrom: number = batch[0]!.seq,
): number {
  const { fence } = applied;
  if (fence) {
    throw new FencedError(
      fence.attempt,
      fence.by,
      `attempt ${fence.attempt} of run ${fence.runId} was fenced by attempt ${fence.by}: a later attempt has delivered, so this one ` +
        'may deliver nothing more; its pending rows are parked, and this process should stop',
    );
  }
  const gap = results.find((result) => result.status === 'gap');
  if (gap) {
    // A gap inside the batches sent together is a race between them; before them, the server lost rows.
    if (gap.expectedSeq < sentFrom) {
      throw new StreamStateLostError(
        `the server expects seq ${gap.expectedSeq} of stream ${stream.producer}/${stream.runId} attempt ${stream.attempt}, ` +
          `but this outbox settled every row before seq ${sentFrom}; the server's store was reset or restored from an old backup. ` +
          'The relay stops rather than resend out of order; see docs/operations.md',
      );
    }
    throw new DeliveryError('sequence_gap', `the server expects seq ${gap.expectedSeq} first; resending in order`);
  }
  // A later attempt took these rows over while they were in flight: it delivers them as its own.
  if (applied.marked === 0 && applied.movedAway > 0) return 0;
  if (applied.marked === 0) {
    // Answers that settle nothing (items the server could not place) must back off, not spin.
    throw new DeliveryError('no_progress', `the server settled none of ${batch.length} rows; retrying with backoff`);
  }
  return applied.marked;
}
