import { z } from 'zod';
import { DeadLetters } from '../src/outbox/file/dead-letters.js';
import { CheckpointValidationError, KeyConflictError } from '../src/outbox/index.js';
import { lastBatch, progressEitherShape, progressNewShape } from './batch.js';
import { live, type Machine, type SimTask } from './jobs.js';
import type { Scene } from './scene.js';
import { expect } from './violation.js';

/** Users' mistakes with their data, each followed by the fix oncebox prints for it, applied as printed. */

/**
 * A user's mistake and its printed fix: a batch's `ready` event goes to a misspelt asset, the server
 * refuses it as unknown and the row goes dead (the stream goes on). The user applies one of the two
 * remedies the refusal names: register the asset (the events are wanted under that name) and send the
 * dead row again, perhaps only after the task was retried on its machine (the dead row is then an older
 * attempt's); or correct the name and publish the batch again in the run's next attempt
 * (docs/runbook.md). Either way the batch is delivered once.
 */
export async function misspellAndFix(scene: Scene, task: SimTask, retryFirst: boolean): Promise<void> {
  const attempt = task.current;
  const misspelt = task.commit(attempt, { typo: true });
  if (misspelt === undefined) return;
  await scene.deliverAll([attempt]);
  // The other remedy, for a batch of even number (drawn so, to keep the seeds' scenarios as they were):
  // the spelling corrected, the run's next attempt publishes the refused batch again.
  if (misspelt.batch % 2 === 0) {
    await task.retry('same');
    if (await task.publishAgain(misspelt.batch)) scene.world.happened('misspelt batch published again under the right name');
  } else {
    if (retryFirst) await task.retry('same');
    await task.fixTypo();
  }
  await scene.deliverAll([task.current]);
}

/**
 * A user's mistake: the job ignores its checkpoint and does its last batches again, perhaps with data
 * that changed since (a recount: the same key, other content). The same content is absorbed as
 * duplicates (G3); changed content is refused, with `key_conflict`: at commit, as a KeyConflictError,
 * when the file still holds the batch's row, or by the server, as a dead row that `dead retry` will not
 * send again. The fix printed for it is applied: the row dropped on the record and the same content
 * emitted; the batch stays on the server once, as first published.
 */
export async function redoPublished(scene: Scene, task: SimTask, batches: number, changed: boolean): Promise<void> {
  const attempt = task.current;
  if (task.over || !live(attempt) || attempt.ended) return;
  const label = `${task.tenant.name}/${task.name}`;
  const last = task.batch(attempt);
  if (changed) scene.world.expectedRefusals.add(`${task.producer} key_conflict`);
  for (let batch = Math.max(1, last - batches + 1); batch <= last; batch++) {
    const change = changed && batch === last;
    try {
      if (task.commit(attempt, { batch, changed: change }) === undefined) return;
    } catch (error) {
      expect('G19', change && error instanceof KeyConflictError && error.code === 'key_conflict', () => `${label}: batch ${batch} done again ${change ? 'with other content' : 'alike'} failed with ${String(error)}`);
      scene.world.happened('changed content refused at commit (key_conflict)');
      if (task.commit(attempt, { batch }) === undefined) return;
    }
  }
  await scene.deliverAll([attempt]);
  if (!live(attempt)) return;
  const letters = new DeadLetters(attempt.box.file);
  const conflicts = letters.list().filter((row) => row.code === 'key_conflict');
  if (conflicts.length === 0) return;
  scene.world.happened('changed content refused by the server (key_conflict)');
  const { retried, skipped } = letters.retry('all', 'the simulation tries every dead row');
  expect('G3', conflicts.every((row) => skipped.some((skip) => skip.id === row.id) && !retried.some((again) => again.id === row.id)), () => `${label}: dead retry sent a key_conflict row again (${JSON.stringify(retried)})`);
  // As the refusal's fix says: the same content for the same key; the conflicting row dropped on the record first.
  for (const row of conflicts) letters.discard([row.id], 'the same content is emitted again');
  if (task.commit(attempt, { batch: last }) !== undefined) await scene.deliverAll([attempt]);
}

/**
 * A user's change and its printed fix: a new version of the job keeps its checkpoint in another shape
 * (`{ batch, rows }`) and is deployed; the task's next attempt runs it, on `machine`. It reads what the
 * old version committed (on its file, or the server's copy on a fresh machine) with the new schema alone,
 * and is refused with the remedy; applied as printed (a schema that reads both shapes and converts the
 * old), it resumes at the batch it was at, and goes on in the new shape.
 */
export async function changeSchemaAndFix(scene: Scene, task: SimTask, machine: Machine): Promise<void> {
  if (task.over) return;
  await task.retry(machine);
  const attempt = task.current;
  if (!live(attempt) || attempt.ended) return;
  const label = `${task.tenant.name}/${task.name}`;
  const box = attempt.box;
  const stored = box.checkpoint('progress', z.unknown()).get();
  const oldShape = stored !== undefined && !progressNewShape.safeParse(stored).success;
  let refusal: unknown;
  try {
    box.checkpoint('progress', progressNewShape).get();
  } catch (error) {
    refusal = error;
  }
  if (oldShape) {
    expect(
      'G19',
      refusal instanceof CheckpointValidationError && refusal.message.includes('z.union([newSchema, oldSchema.transform(toNew)])') && refusal.message.includes("When a checkpoint's schema changes"),
      () => `${label}: the new schema read the old checkpoint ${JSON.stringify(stored)} with ${String(refusal ?? 'no refusal')}`,
    );
    scene.world.happened(`a changed checkpoint schema refused at read, on the ${machine} machine`);
  }
  const read = box.checkpoint('progress', progressEitherShape).get();
  expect('G1', (read?.batch ?? 0) === lastBatch(box), () => `${label}: the converting schema read ${JSON.stringify(read)} where the checkpoint is at batch ${lastBatch(box)}`);
  task.newShape = true;
  task.commit(attempt);
  await scene.deliverAll([attempt]);
}
