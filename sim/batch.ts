import { z } from 'zod';
import type { CommitTransaction, Emission, Outbox } from '../src/outbox/index.js';
import type { Tenant } from './world.js';

/** Every task runs in the one run of its tenant. */
export const RUN_ID = 'r';
const progressSchema = z.object({ batch: z.number().int() });
/**
 * A user's change to the job: its new version keeps its progress as `{ batch, rows }`. The schema alone
 * cannot read what the old version committed; the remedy the refusal prints is a schema that reads both.
 */
export const progressNewShape = z.object({ batch: z.number().int(), rows: z.number().int() });
export const progressEitherShape = z.union([progressNewShape, progressSchema.transform((old) => ({ ...old, rows: 0 }))]);

/** The last batch `box`'s checkpoint records (0 before the first). */
export function lastBatch(box: Outbox): number {
  return box.checkpoint('progress', progressSchema).get()?.batch ?? 0;
}

/**
 * A task's next batch in one commit: its checkpoint set to b, one event now (`<task>.<b>` on the
 * tenant's `ready`, or on the misspelt asset by mistake) and one held for the run's success (the same
 * partition on `done`). The simulation's in-process jobs and its job processes commit alike.
 */
export function commitBatch(box: Outbox, assets: Tenant['assets'], task: string, options: BatchOptions = {}): CommittedBatch {
  const batch = options.batch ?? lastBatch(box) + 1;
  const partitionKey = partitionKeyOf(task, batch, options.sharedPartitions);
  let ready!: Emission;
  box.commit((tx) => {
    writeProgress(box, tx, batch, options.newShape);
    ready = tx.emit(box.asset(options.typo ? assets.typo : assets.ready), {
      partitionKey,
      partitionDate: partitionDateOf(batch),
      ...(options.changed ? { extra: { rows: 'recounted' } } : {}),
    });
    tx.emit(box.asset(assets.done), { partitionKey, on: 'success' });
  });
  return { batch, ready };
}

/** The checkpoint set to `batch` in a commit of its own, nothing emitted: a job set back to redo batches. */
export function setProgress(box: Outbox, batch: number, newShape = false): void {
  box.commit((tx) => writeProgress(box, tx, batch, newShape));
}

/** The checkpoint set to `batch` within a commit, in the job version's shape. */
function writeProgress(box: Outbox, tx: CommitTransaction, batch: number, newShape = false): void {
  if (newShape) tx.set(box.checkpoint('progress', progressEitherShape), { batch, rows: batch });
  else tx.set(box.checkpoint('progress', progressSchema), { batch });
}

export interface BatchOptions {
  /** Its `ready` event goes to the misspelt asset: a user's mistake. */
  typo?: boolean;
  /** This batch number rather than the next: a job that ignores its checkpoint and does a batch again. */
  batch?: number;
  /** Its `ready` event's content differs from what the batch emitted before (its data changed): under the same key, a conflict. */
  changed?: boolean;
  /** Its checkpoint in the new version's shape (see progressNewShape). */
  newShape?: boolean;
  /** Its partition is the batch's alone, which the run's other tasks publish too (Tenant's sharedPartitions). */
  sharedPartitions?: boolean;
}

/** A batch's partition key: `<task>.<batch>`, or `all.<batch>` where a run's tasks share their partitions. */
export function partitionKeyOf(task: string, batch: number, shared = false): string {
  return `${shared ? 'all' : task}.${batch}`;
}

/**
 * The `ready` event of a batch already done, emitted again alone, as it was (no checkpoint moves): a job
 * that announces its last batch again as it starts. Absorbed as a duplicate wherever it was published; on
 * the misspelt asset by mistake, refused while that asset is unknown.
 */
export function announceAgain(box: Outbox, assets: Tenant['assets'], task: string, batch: number, options: { typo?: boolean; sharedPartitions?: boolean } = {}): void {
  const partitionKey = partitionKeyOf(task, batch, options.sharedPartitions);
  box.commit((tx) => tx.emit(box.asset(options.typo ? assets.typo : assets.ready), { partitionKey, partitionDate: partitionDateOf(batch) }));
}

/** The day a batch's data is of: batch b covers the b-th day of 2026. */
export function partitionDateOf(batch: number): string {
  return new Date(Date.UTC(2026, 0, batch)).toISOString();
}

/** A batch committed: its number, and its event now (whose receipt a job may await). */
export interface CommittedBatch {
  batch: number;
  ready: Emission;
}

const seenSchema = z.object({ attempt: z.number().int(), n: z.number().int() });

/**
 * A checkpoint-only commit, as a job makes when a batch brought no data: its second checkpoint, `seen`,
 * counts the batches it looked at and names the attempt that set it. Consecutive ones coalesce in the
 * file into one update, so a request may carry checkpoint items alone.
 */
export function commitSeen(box: Outbox, attempt: number): void {
  const seen = box.checkpoint('seen', seenSchema);
  const n = (seen.get()?.n ?? 0) + 1;
  box.commit((tx) => tx.set(seen, { attempt, n }));
}
