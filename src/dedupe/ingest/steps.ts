import { Limits } from '../../protocol/limits.js';
import type { ItemResult, StreamIdentity } from '../../protocol/wire.js';
import { subjectOf, type CheckedItem, type InvalidItem } from '../item-check.js';
import type { RunOutcome } from '../tables.js';
import { runOutcomeOf } from './run-outcome.js';
import { causedEventKeys, causesNeeded, DEFAULT_LINEAGE_POLICY, placeInLineage, type CauseEvent, type LineagePolicy } from './lineage.js';
import { capCheckpointNames, newEventIds, planIngest, refuseAttempt, updatesCheckpoints } from './plan.js';
import { keyClaims, readsNeeded, resolveIngest, type DedupeRecord, type IngestWrites, type KeyClaim, type PositionOutcome, type RecordedOutcome } from './resolve.js';

/** The time a request is stamped with: an ISO timestamp for receipts, milliseconds for retention. */
export interface IngestClock {
  ts: string;
  ms: number;
}

/**
 * What the ingest of one request asks its store for, in this order, all inside one transaction. The
 * decisions are made here, once; a store only reads and writes.
 */
export type IngestStep =
  /**
   * Lock the stream (where others could write it at once), mark it active now, and read its epoch, its
   * attempt's last seq, and whether the stream is new to the store.
   */
  | { op: 'position'; clock: IngestClock }
  /** Read the stored events that new events name as their cause, by cursor. */
  | { op: 'causes'; cursors: readonly number[] }
  /** Read the names of the checkpoints the stream holds (at most Limits.maxCheckpointNames). */
  | { op: 'checkpointNames' }
  /** Insert a dedupe record for each key where none exists; answer with the keys inserted. */
  | { op: 'claim'; claims: readonly KeyClaim[]; clock: IngestClock }
  /** Read the outcomes at these positions of the attempt, and the dedupe records of these keys. */
  | { op: 'read'; seqs: readonly number[]; keys: readonly string[] }
  | { op: 'write'; writes: IngestWrites & { runOutcome: RunOutcome | null }; clock: IngestClock }
  /** Count a request of an attempt below the epoch, refused as fenced (a zombie's), for the catalog. */
  | { op: 'fenced'; items: number; fencedBy: number; clock: IngestClock }
  /** Keep refusals of a request refused whole, which take no position (`attempt_too_high`), for the catalog. */
  | { op: 'unplaced'; refusals: readonly PositionOutcome[]; clock: IngestClock };

/** What the store answers to each step. */
export interface StepAnswers {
  position: { epoch: number; lastSeq: number; fresh: boolean };
  causes: ReadonlyMap<number, CauseEvent>;
  checkpointNames: ReadonlySet<string>;
  claim: ReadonlySet<string>;
  read: { outcomes: ReadonlyMap<number, RecordedOutcome>; records: ReadonlyMap<string, DedupeRecord> };
  write: void;
  fenced: void;
  unplaced: void;
}

export type IngestSteps = Generator<IngestStep, ItemResult[], StepAnswers[keyof StepAnswers]>;

export interface IngestRequest {
  stream: StreamIdentity;
  items: readonly (CheckedItem | InvalidItem)[];
  now: Date;
  maxAttemptStep: number;
  isRegistered: (asset: string) => boolean;
  lineage: LineagePolicy;
  /** What the request's token may do inside the ingest: see IngestScope. */
  scope: IngestScope;
}

/**
 * What the request's token may do inside one ingest, beyond the producer and assets the HTTP layer
 * checks: which assets' events it may name as a cause (`consumes`). A store called directly, not
 * through the HTTP API, is trusted with every cause.
 */
export interface IngestScope {
  mayCite(asset: string): boolean;
  /** The token may name no cause at all: every cause is refused, whether the store holds it or not. */
  citesNothing?: boolean;
  /**
   * Called when the request is the first of a stream new to the store, before anything is written: it
   * throws to refuse the whole request (the token opened streams faster than it may).
   */
  openStream?(): void;
}

/** The scope of a caller trusted with everything: tests, tools and the server's own use. */
export const TRUSTED_SCOPE: IngestScope = { mayCite: () => true };

/** How far above a stream's epoch a new attempt may be, unless told otherwise. */
export const DEFAULT_MAX_ATTEMPT_STEP = 1000;

/** What a store's settings decide in every ingest: how far an attempt may jump, and the lineage limits. */
export type IngestPolicy = Pick<IngestRequest, 'maxAttemptStep' | 'lineage'>;

/** The policy of a store opened with these options, defaults filled in. */
export function ingestPolicy(options: { maxAttemptStep?: number | undefined; lineage?: LineagePolicy | undefined }): IngestPolicy {
  return { maxAttemptStep: options.maxAttemptStep ?? DEFAULT_MAX_ATTEMPT_STEP, lineage: options.lineage ?? DEFAULT_LINEAGE_POLICY };
}

const NOTHING_READ: StepAnswers['read'] = { outcomes: new Map(), records: new Map() };

/**
 * The ingest of one request as a sequence of store steps. A generator, so that SQLite can run it inside
 * a synchronous transaction and PostgreSQL with a round trip per step, from the same code.
 */
export function* ingestSteps(request: IngestRequest): IngestSteps {
  const { stream, items, now } = request;
  const clock: IngestClock = { ts: now.toISOString(), ms: now.getTime() };
  const { epoch, lastSeq: lastSeqBefore, fresh } = (yield { op: 'position', clock }) as StepAnswers['position'];
  if (fresh) request.scope.openStream?.();
  // Checked in the same transaction that a later attempt's first delivery moves the epoch in, so no
  // item of a zombie is accepted once its retry has delivered anything.
  const refusal = refuseAttempt(items, stream.attempt, epoch, request.maxAttemptStep);
  if (refusal) {
    if (refusal[0]?.status === 'fenced') yield { op: 'fenced', items: items.length, fencedBy: epoch, clock };
    else yield { op: 'unplaced', refusals: withSubjects(items, unplacedOutcomes(refusal)), clock };
    return refusal;
  }
  const placed = planIngest(items, lastSeqBefore, request.isRegistered);
  const cursors = causesNeeded(placed);
  let plan = placed;
  if (cursors.length > 0) {
    // An event already stored (sent again, by a retry on a fresh machine say) is answered as it was stored,
    // whatever its lineage would say today: its records are read first, so that only new events are judged.
    const { records } = (yield { op: 'read', seqs: [], keys: causedEventKeys(placed) }) as StepAnswers['read'];
    const causes = (yield { op: 'causes', cursors }) as StepAnswers['causes'];
    // Before any key is claimed: an event refused for its lineage must not leave a dedupe record behind.
    plan = placeInLineage(placed, causes, request.lineage, (asset) => request.scope.mayCite(asset), new Set(records.keys()), request.scope.citesNothing === true);
  }
  if (updatesCheckpoints(plan)) plan = capCheckpointNames(plan, (yield { op: 'checkpointNames' }) as StepAnswers['checkpointNames'], Limits.maxCheckpointNames);
  const claims = keyClaims(plan, newEventIds);
  // Insert first: the unique key decides who is first, with no window between a check and an insert.
  // Stryker disable next-line ConditionalExpression: an empty claim or read asks the store for nothing; skipping it saves a round trip
  const claimed = claims.length === 0 ? new Set<string>() : ((yield { op: 'claim', claims, clock }) as StepAnswers['claim']);
  const needed = readsNeeded(plan, lastSeqBefore, claimed);
  const read =
    // Stryker disable next-line ConditionalExpression: as above
    needed.seqs.length + needed.keys.length === 0 ? NOTHING_READ : ((yield { op: 'read', ...needed }) as StepAnswers['read']);
  const { results, writes } = resolveIngest(plan, { claimed, ...read }, claims, { ts: clock.ts, lastSeqBefore, attempt: stream.attempt, epoch });
  const outcomes = withSubjects(items, writes.outcomes);
  const unplaced = withSubjects(items, writes.unplaced);
  yield { op: 'write', writes: { ...writes, outcomes, unplaced, runOutcome: runOutcomeOf(writes.events, stream.attempt) }, clock };
  return results;
}

/** Each outcome with what its item named (asset, partition), for the catalog's list of refusals. */
function withSubjects(items: readonly (CheckedItem | InvalidItem)[], outcomes: readonly PositionOutcome[]): PositionOutcome[] {
  const subjects = new Map(items.map((item) => [item.seq, subjectOf(item)]));
  return outcomes.map((outcome) => ({ ...outcome, subject: subjects.get(outcome.seq) }));
}

/** The refusals of a request refused whole, as outcomes; an item without a readable position is left out. */
function unplacedOutcomes(results: readonly ItemResult[]): PositionOutcome[] {
  return results.flatMap((result): PositionOutcome[] =>
    result.status === 'rejected' && result.seq !== null ? [{ seq: result.seq, key: result.key!, status: 'rejected', code: result.code, detail: result.detail, field: result.field ?? null }] : [],
  );
}

/** A store's answer to each step; a method may return a promise only where the runner awaits. */
export type StepHandler<Async extends boolean> = {
  [Op in IngestStep['op']]: (step: Extract<IngestStep, { op: Op }>) => Async extends true ? Promise<StepAnswers[Op]> : StepAnswers[Op];
};

function answer<Async extends boolean>(handler: StepHandler<Async>, step: IngestStep) {
  return handler[step.op](step as never);
}

/** Runs the steps synchronously, for a store whose transaction may not yield (better-sqlite3). */
export function runIngestSync(steps: IngestSteps, handler: StepHandler<false>): ItemResult[] {
  let next = steps.next();
  while (!next.done) next = steps.next(answer(handler, next.value));
  return next.value;
}

/** Runs the steps with a round trip each, for a store on a connection (PostgreSQL). */
export async function runIngest(steps: IngestSteps, handler: StepHandler<true>): Promise<ItemResult[]> {
  let next = steps.next();
  while (!next.done) next = steps.next(await answer(handler, next.value));
  return next.value;
}
