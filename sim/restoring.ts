import { StreamStateLostError } from '../src/outbox/index.js';
import { live, type SimTask } from './jobs.js';
import type { Scene } from './scene.js';
import { until } from './waiting.js';
import { expect } from './violation.js';
import { pgBackupToolsAvailable } from './world.js';

/**
 * The server is restored from an older backup (SQLite's online backup, or `pg_dump` of a PostgreSQL
 * world's schema, docs/operations.md): taken at a
 * quiet moment, then every live task commits and delivers a batch, then the backup goes back. A relay
 * whose stream the server now has behind stops with `stream_state_lost`, marks nothing and says so in
 * `status()` (it never resends out of order). The documented fix is applied: every job of the runs is
 * stopped, its file moved aside, and each task not over is retried on a fresh machine with a higher
 * attempt (numbered, or claimed from the server), resuming from what the backup holds; what it lost is
 * published again as the tasks go on (the checker forgets it with the server).
 */
export async function restoreOlderBackup(scene: Scene, retries: 'numbered' | 'claim'): Promise<void> {
  if (scene.world.store === 'postgres' && !pgBackupToolsAvailable()) {
    scene.world.happened('no backup restored (no pg_dump here)');
    return;
  }
  // A quiet moment: held requests arrive, zombies are gone, every file delivers, every group drains.
  await scene.world.proxy.releaseHeld();
  for (const task of scene.tasks) task.endZombie();
  await scene.deliverAll(scene.tasks.map((task) => task.current));
  for (const group of scene.groups) {
    await group.catchUp();
    await group.drain();
  }
  for (const forwarder of scene.forwarders) await forwarder.catchUp();
  await scene.checker.check();
  const backedUpTo = scene.checker.newestCursor;
  const backup = await scene.world.backup();
  // The jobs go on after the backup: what they deliver now, the backup does not hold.
  const touched = scene.tasks.filter((task) => !task.over && live(task.current) && !task.current.ended && task.commit(task.current) !== undefined);
  await scene.deliverAll(touched.map((task) => task.current));
  await scene.world.restore(backup);
  scene.checker.forgetAfter(backedUpTo);
  // A job goes on with its relay in process: its relay must stop, mark nothing, and say so.
  const witness = touched.find((task) => live(task.current));
  if (witness !== undefined && (await witness.relayOnItsOwn())) {
    try {
      await streamStateLost(scene, witness);
    } finally {
      await witness.relayByHand();
    }
  }
  // As docs/operations.md says: stop every job of the runs, move their files aside (a file the tasks
  // shared is one new file on their first machine), retry on fresh files.
  const movedAside = new Map<string, string>();
  for (const task of scene.tasks) {
    const path = movedAside.get(task.firstMachine) ?? scene.world.newPath(`${task.tenant.name}-moved-aside`);
    movedAside.set(task.firstMachine, path);
    task.firstMachine = path;
  }
  for (const task of scene.tasks) {
    if (task.over) continue;
    if (retries === 'claim') await task.claimedRetry('fresh', 'claim');
    else await task.retry('fresh');
  }
  scene.world.happened(`the server restored from an older backup on ${scene.world.store}, the runs retried on fresh machines (${retries})`);
}

/**
 * After a restore from an older backup, `task`'s job commits a batch with its relay in process: the
 * server expects positions the file settled long ago, so the relay stops with `stream_state_lost`
 * rather than resend out of order; it marks nothing, `status()` shows it, and the batch's receipt
 * rejects with it (G3, G19).
 */
async function streamStateLost(scene: Scene, task: SimTask): Promise<void> {
  const attempt = task.current;
  const label = `${task.tenant.name}/${task.name}`;
  const committed = task.commit(attempt);
  if (committed === undefined) return;
  const pending = attempt.box.file.pendingCount();
  let outcome: unknown;
  committed.ready.receipt().then(
    () => (outcome = 'delivered'),
    (error: unknown) => (outcome = error),
  );
  const stopped = await until(() => (attempt.box.status().lastError?.code === 'stream_state_lost' && outcome !== undefined ? true : undefined));
  expect('G19', stopped === true, () => `${label}: after a restore, its relay's stop was not shown: status() says ${JSON.stringify(attempt.box.status().lastError)}, the receipt ${String(outcome)}`);
  expect('G3', outcome instanceof StreamStateLostError, () => `${label}: after a restore, the batch's receipt came to ${String(outcome)}`);
  expect('G3', attempt.box.file.pendingCount() === pending, () => `${label}: a relay stopped by stream_state_lost changed the rows waiting (${pending} before, ${attempt.box.file.pendingCount()} after)`);
  scene.world.happened('a relay stopped with stream_state_lost after a restore');
}
