import { randomFillSync } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';
import { RejectionCode } from '../../protocol/errors.js';
import type { ItemResult } from '../../protocol/wire.js';
import type { CheckedCheckpoint, CheckedEvent, CheckedItem, InvalidItem } from '../item-check.js';
import type { EventLineage } from './event-lineage.js';
import { isLifecycleAsset } from '../../protocol/lifecycle.js';
import { echo, MAX_REFUSAL_DETAIL, MAX_REFUSAL_FIELD } from '../../protocol/text.js';

/**
 * What to do with each item of a batch, decided from the stream's last sequence number alone, before
 * any dedupe record is touched.
 */
export type Placement =
  /** Final without touching the dedupe table, and without a stream position: a gap, an unreadable item. */
  | { type: 'final'; result: ItemResult }
  /** Refused for good at a stream position it took: recorded, so that a retry gets the same answer. */
  | { type: 'refused'; result: RefusedResult }
  /** A position the stream already took: answer as the first time. */
  | { type: 'replay'; item: CheckedItem | InvalidItem; seq: number; key: string }
  | { type: 'checkpoint'; item: CheckedCheckpoint }
  /** A new event; `lineage` is set once its cause is read (absent: a producer's own event). */
  | { type: 'event'; item: CheckedEvent; lineage?: EventLineage };

/** A refusal that took a stream position. */
export type RefusedResult = Extract<ItemResult, { status: 'rejected' }> & { seq: number; key: string };

export interface IngestPlan {
  placements: Placement[];
  /** The stream's last sequence number after this batch. */
  lastSeq: number;
}

export function planIngest(
  items: readonly (CheckedItem | InvalidItem)[],
  lastSeqBefore: number,
  isRegistered: (asset: string) => boolean,
): IngestPlan {
  let lastSeq = lastSeqBefore;
  const placements = items.map((item): Placement => {
    if (item.seq === null) {
      // Without a readable seq the item cannot take a place in the stream; the items after it will gap.
      return {
        type: 'final',
        result: { status: 'rejected', seq: null, key: null, code: RejectionCode.InvalidItem, ...refusalText(item) },
      };
    }
    const { seq, key } = item;
    if (seq <= lastSeq) return { type: 'replay', item, seq, key };
    if (seq > lastSeq + 1) return { type: 'final', result: { status: 'gap', seq, key, expectedSeq: lastSeq + 1 } };
    lastSeq = seq;
    if (!item.valid) {
      return {
        type: 'refused',
        result: { status: 'rejected', seq, key, code: item.code ?? RejectionCode.InvalidItem, ...refusalText(item) },
      };
    }
    if (item.kind === 'checkpoint') return { type: 'checkpoint', item };
    // Lifecycle assets need no registering: every producer's terminal commits emit them.
    if (!isLifecycleAsset(item.payload.asset) && !isRegistered(item.payload.asset)) {
      const asset = item.payload.asset;
      return {
        type: 'refused',
        result: {
          status: 'rejected',
          seq,
          key,
          code: RejectionCode.UnknownAsset,
          // The cause alone: what fixes it (registering, or the name corrected) is the remedy table's (rejection-fixes.ts).
          detail: `asset: "${echo(asset)}" is not registered on this server`,
          field: 'asset',
        },
      };
    }
    return { type: 'event', item };
  });
  return { placements, lastSeq };
}

/** Whether the plan updates any checkpoint: only then are the stream's checkpoint names read. */
export function updatesCheckpoints(plan: IngestPlan): boolean {
  return plan.placements.some((placement) => placement.type === 'checkpoint');
}

/**
 * Refuses, at the position it took, each checkpoint of a new name once the stream holds `most` names
 * (those it held before and those this batch added), so that a stream's state stays bounded.
 */
export function capCheckpointNames(plan: IngestPlan, held: ReadonlySet<string>, most: number): IngestPlan {
  const names = new Set(held);
  const placements = plan.placements.map((placement): Placement => {
    if (placement.type !== 'checkpoint' || names.has(placement.item.name)) return placement;
    const { item } = placement;
    if (names.size < most) {
      names.add(item.name);
      return placement;
    }
    return {
      type: 'refused',
      result: {
        status: 'rejected',
        seq: item.seq,
        key: item.key,
        code: RejectionCode.TooManyCheckpoints,
        detail: `name: this stream holds ${most} checkpoint names already, the most it may; keep several values in one checkpoint (an object) rather than a checkpoint each`,
        field: 'name',
      },
    };
  });
  return { ...plan, placements };
}

/** An invalid item's field and detail as a refusal answers and records them: bounded, whatever the item held. */
function refusalText(item: InvalidItem): { detail: string; field: string } {
  return { detail: echo(item.detail, MAX_REFUSAL_DETAIL), field: echo(item.field, MAX_REFUSAL_FIELD) };
}

/**
 * The answer to every item of a request whose attempt the stream cannot take, or undefined when it can:
 * an attempt below the epoch is fenced (a zombie), and one more than `maxAttemptStep` above it is refused,
 * since taking it would fence every later attempt of the run for good. Neither touches the stream.
 */
export function refuseAttempt(
  items: readonly (CheckedItem | InvalidItem)[],
  attempt: number,
  epoch: number,
  maxAttemptStep: number,
): ItemResult[] | undefined {
  if (attempt < epoch) {
    const detail = `fenced by attempt ${epoch}: attempt ${attempt} of this run may deliver nothing more`;
    return items.map((item) => ({ status: 'fenced', seq: item.seq, key: item.key, code: 'fenced', epoch, detail }));
  }
  if (attempt > epoch + maxAttemptStep) {
    const detail =
      `stream.attempt: ${attempt} is more than ${maxAttemptStep} above this run's highest attempt (${epoch}); a retry raises the ` +
      'attempt by one, and taking this one would fence every later attempt of the run for good. Send the real try number ' +
      '(or raise the server\'s maxAttemptStep)';
    return items.map((item) => ({ status: 'rejected', seq: item.seq, key: item.key, code: RejectionCode.AttemptTooHigh, detail, field: 'stream.attempt' }));
  }
  return undefined;
}

/**
 * UUIDv7 event ids for a batch. The random bits are drawn in one call for the whole batch: drawing them
 * per id costs a system call each, which on a VM is most of an id's cost.
 */
export function newEventIds(count: number): string[] {
  const random = randomFillSync(new Uint8Array(16 * count));
  // Stryker disable next-line ObjectLiteral: uuid then draws its own random bits: the ids are as unique, only slower
  return Array.from({ length: count }, (_, i) => uuidv7({ random: random.subarray(16 * i, 16 * i + 16) }));
}
