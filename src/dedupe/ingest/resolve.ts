import { RejectionCode } from '../../protocol/errors.js';
import type { ItemResult } from '../../protocol/wire.js';
import type { CheckedEvent, CheckedItem, InvalidItem, ItemSubject } from '../item-check.js';
import type { IngestPlan, Placement } from './plan.js';
import { ROOT_LINEAGE, type EventLineage } from './lineage.js';

/** The statuses a stream position keeps when it did not become an event. */
export type RecordedStatus = 'checkpointed' | 'rejected' | 'conflict';

/** What a store recorded for a stream position that did not become an event. */
export interface RecordedOutcome {
  key: string;
  status: RecordedStatus;
  /** The rejection code; '' for a checkpoint update. */
  code: string;
  detail: string;
  field: string | null;
}

/** An outcome with the position it was recorded at. */
export interface PositionOutcome extends RecordedOutcome {
  seq: number;
  /** What the refused item named (asset, partition), for the catalog's list of refusals; absent when unknown. */
  subject?: ItemSubject | undefined;
}

/** A dedupe record: the receipt of a key. */
export interface DedupeRecord {
  fingerprint: string;
  eventId: string;
  ts: string;
}

/**
 * A new event's key, inserted before anything is decided (insert first). It carries the whole event, so
 * that a store whose event row is its own dedupe record (SQLite) claims the key by storing the event: a
 * claimed key always becomes exactly this event, the first placement of its key in the request.
 */
export interface KeyClaim {
  key: string;
  fingerprint: string;
  eventId: string;
  event: { item: CheckedEvent; lineage: EventLineage };
}

/** What the store read for one request, inside its transaction. */
export interface StoredState {
  /** The keys whose claim inserted a dedupe record: this request is the first with them. */
  claimed: ReadonlySet<string>;
  /** Outcomes recorded at the positions this request retries. */
  outcomes: ReadonlyMap<number, RecordedOutcome>;
  /** The dedupe records that existed before this request, for the keys its answers depend on. */
  records: ReadonlyMap<string, DedupeRecord>;
}

export interface NewEvent {
  item: CheckedEvent;
  eventId: string;
  lineage: EventLineage;
}

/** The writes that make a request's answers durable; the store makes them all in its transaction. */
export interface IngestWrites {
  events: NewEvent[];
  outcomes: PositionOutcome[];
  /**
   * Refusals that cannot be recorded at their position, which another item's outcome holds (an item at a
   * position taken by another key: `sequence_reused`): kept apart, for the catalog's list of refusals.
   */
  unplaced: PositionOutcome[];
  /** The newest value of each checkpoint this request updated. */
  checkpoints: CheckpointWrite[];
  /**
   * Revised values of updates at positions taken before: each applies only while its position is still
   * the newest of its name in this attempt, and its revision is higher than the one stored.
   */
  revisions: CheckpointWrite[];
  /** The stream's new last sequence number; null when the request took no position. */
  lastSeq: number | null;
  /** The stream's new epoch; null when it stays. */
  epoch: number | null;
  /** Each item answered as a duplicate (a retry absorbed), with its asset: counted for the catalog. */
  duplicates: DuplicateWrite[];
}

export interface DuplicateWrite {
  key: string;
  asset: string;
}

export interface CheckpointWrite {
  name: string;
  value: string;
  seq: number;
  revision: number;
}

/** The dedupe keys a plan's new events claim, first occurrence only: a later one in the batch retries it. */
export function keyClaims(plan: IngestPlan, eventIds: (count: number) => string[]): KeyClaim[] {
  const seen = new Set<string>();
  const events: { item: CheckedEvent; lineage: EventLineage }[] = [];
  for (const placement of plan.placements) {
    if (placement.type !== 'event' || seen.has(placement.item.key)) continue;
    seen.add(placement.item.key);
    events.push({ item: placement.item, lineage: placement.lineage ?? ROOT_LINEAGE });
  }
  const ids = eventIds(events.length);
  return events.map((event, i) => ({ key: event.item.key, fingerprint: event.item.fingerprint, eventId: ids[i]!, event }));
}

/** The positions and keys whose stored state the plan's answers depend on. */
export function readsNeeded(plan: IngestPlan, lastSeqBefore: number, claimed: ReadonlySet<string>): { seqs: number[]; keys: string[] } {
  const seqs = new Set<number>();
  const keys = new Set<string>();
  for (const placement of plan.placements) {
    if (placement.type === 'replay') {
      // A position this same request took has nothing stored yet: its answer comes from the request.
      if (placement.seq <= lastSeqBefore) seqs.add(placement.seq);
      keys.add(placement.key);
    } else if (placement.type === 'event') {
      keys.add(placement.item.key);
    }
  }
  for (const key of claimed) keys.delete(key);
  return { seqs: [...seqs], keys: [...keys] };
}

/**
 * Turns what the store read into each item's answer and the writes to make. Items are answered in
 * request order, each seeing what the items before it did: an item sent twice in one request is
 * answered the second time as the first time, exactly as a retry in a later request would be.
 * It is long because it is one walk over the placements, each kind answered and recorded where it is
 * met; split, an item's answer and the write that makes it durable would part.
 */
export function resolveIngest(
  plan: IngestPlan,
  stored: StoredState,
  claims: readonly KeyClaim[],
  context: { ts: string; lastSeqBefore: number; attempt: number; epoch: number },
): { results: ItemResult[]; writes: IngestWrites } {
  const outcomes = new Map(stored.outcomes);
  const records = new Map(stored.records);
  // Stryker disable next-line MethodExpression: a key whose claim failed was read from the store, so records has it and it is never accepted
  const claimedIds = new Map(claims.filter((claim) => stored.claimed.has(claim.key)).map((claim) => [claim.key, claim.eventId]));
  const events: NewEvent[] = [];
  const recorded: PositionOutcome[] = [];
  const unplaced: PositionOutcome[] = [];
  const revisions: CheckpointWrite[] = [];
  const checkpoints = new Map<string, CheckpointWrite>();
  const record = (seq: number, outcome: RecordedOutcome) => {
    outcomes.set(seq, outcome);
    recorded.push({ seq, ...outcome });
  };

  const results = plan.placements.map(resolvePlacement);
  function resolvePlacement(placement: Placement): ItemResult {
    switch (placement.type) {
      case 'final':
        return placement.result;
      case 'refused': {
        const { result } = placement;
        record(result.seq, { key: result.key, status: result.status, code: result.code, detail: result.detail, field: result.field ?? null });
        return result;
      }
      case 'replay': {
        const { item, seq, key } = placement;
        const outcome = outcomes.get(seq);
        const result = replayResult(item, seq, key, outcome, outcome ? undefined : records.get(key));
        // Refused at a position another item holds: listed with the refusals, but placed nowhere.
        if ((result.status === 'rejected' && result.code === RejectionCode.SequenceReused) || result.status === 'conflict') {
          unplaced.push({ seq, key, status: result.status, code: result.code, detail: result.detail, field: result.status === 'rejected' ? (result.field ?? null) : null });
        }
        if (result.status === 'checkpointed' && item.kind === 'checkpoint' && item.revision > 0) {
          const revised = { name: item.name, value: item.value, seq, revision: item.revision };
          // A position this request took itself is written with its newest revision below; one taken before is revised in place.
          const taken = checkpoints.get(item.name);
          if (taken?.seq === seq) checkpoints.set(item.name, newer(taken, revised));
          else revisions.push(revised);
        }
        return result;
      }
      case 'checkpoint': {
        const { item } = placement;
        checkpoints.set(item.name, { name: item.name, value: item.value, seq: item.seq, revision: item.revision });
        // Stryker disable next-line StringLiteral: a replayed 'checkpointed' outcome is answered from its status alone
        record(item.seq, { key: item.key, status: 'checkpointed', code: '', detail: '', field: null });
        return { status: 'checkpointed', seq: item.seq, key: item.key };
      }
      case 'event': {
        const { item, lineage = ROOT_LINEAGE } = placement;
        const eventId = claimedIds.get(item.key);
        // Stryker disable next-line ConditionalExpression: a key not claimed was read from the store, so records has it
        if (eventId !== undefined && !records.has(item.key)) {
          records.set(item.key, { fingerprint: item.fingerprint, eventId, ts: context.ts });
          events.push({ item, eventId, lineage });
          return { status: 'accepted', seq: item.seq, key: item.key, eventId, timestamp: context.ts };
        }
        const result = existingKeyResult(item, records.get(item.key)!);
        if (result.status === 'conflict') record(result.seq, { key: result.key, status: result.status, code: result.code, detail: result.detail, field: null });
        return result;
      }
    }
  }
  const tookPositions = plan.lastSeq !== context.lastSeqBefore;
  const writes: IngestWrites = {
    events,
    outcomes: recorded,
    unplaced,
    checkpoints: [...checkpoints.values()],
    revisions,
    lastSeq: tookPositions ? plan.lastSeq : null,
    // The first delivery of a later attempt moves the epoch, which fences every earlier attempt.
    // Stryker disable next-line ConditionalExpression,EqualityOperator: raising the epoch to the attempt it already is writes the same value
    epoch: tookPositions && context.attempt > context.epoch ? context.attempt : null,
    duplicates: duplicatesOf(plan.placements, results),
  };
  return { results, writes };
}

/** The events whose retried delivery this request answered as a duplicate: the catalog counts them. */
function duplicatesOf(placements: readonly Placement[], results: readonly ItemResult[]): DuplicateWrite[] {
  return placements.flatMap((placement, index) => {
    const result = results[index]!;
    // Stryker disable next-line ConditionalExpression: only an event's key can be answered as a duplicate
    if (result.status === 'duplicate' && 'item' in placement && placement.item.kind === 'event') return [{ key: result.key, asset: placement.item.payload.asset }];
    return [];
  });
}

/** Of two writes of one checkpoint at one position, the one with the higher revision. */
function newer(a: CheckpointWrite, b: CheckpointWrite): CheckpointWrite {
  return b.revision > a.revision ? b : a;
}

/** The answer to a retry of a taken position: exactly what the first answer was. */
export function replayResult(
  item: CheckedItem | InvalidItem,
  seq: number,
  key: string,
  outcome: RecordedOutcome | undefined,
  existing: DedupeRecord | undefined,
): ItemResult {
  if (outcome && outcome.key === key) {
    if (outcome.status === 'checkpointed') return { status: 'checkpointed', seq, key };
    if (outcome.status === 'conflict') return { status: 'conflict', seq, key, code: RejectionCode.KeyConflict, detail: outcome.detail };
    return {
      status: 'rejected',
      seq,
      key,
      code: outcome.code as RejectionCode,
      detail: outcome.detail,
      ...(outcome.field === null ? {} : { field: outcome.field }),
    };
  }
  // The item's key is stored already: the same content is a duplicate, other content a conflict, as for
  // a key at a new position. The same mistake (a re-run that changed its data) gets the same code
  // whether or not the re-run reused the position (attempt 1 again, on a fresh file).
  if (!outcome && existing && item.kind === 'event') return existingKeyResult({ ...item, seq, key }, existing);
  return {
    status: 'rejected',
    seq,
    key,
    code: RejectionCode.SequenceReused,
    detail: `seq ${seq} of this stream was already taken by another item; a stream's sequence numbers must not be reused`,
    field: 'seq',
  };
}

/** The answer for a key the dedupe table already held when this item tried to insert it. */
export function existingKeyResult(item: CheckedEvent, existing: DedupeRecord): ItemResult {
  if (existing.fingerprint === item.fingerprint) {
    return { status: 'duplicate', seq: item.seq, key: item.key, eventId: existing.eventId, timestamp: existing.ts };
  }
  return {
    status: 'conflict',
    seq: item.seq,
    key: item.key,
    code: RejectionCode.KeyConflict,
    detail: `key ${item.key} was stored before with a different payload (event ${existing.eventId}); a re-run must emit the same asset, partition and extra for the same key, or use a new key`,
  };
}
