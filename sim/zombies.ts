import { expect } from './violation.js';
import { live, type Attempt, type Machine, type SimTask } from './jobs.js';
import type { Scene } from './scene.js';
import { STUCK_AFTER_ROUNDS } from './waiting.js';

/**
 * Zombies and the fences that stop them (G10, G26): an attempt that lives on beside its retry, in
 * process or as a real process frozen with SIGSTOP, and retries whose attempts are claimed from the server.
 */

/**
 * G10 where it is hardest: the retry starts beside the attempt before it, commits and delivers a batch
 * (the server now knows the newer attempt), and only then does the zombie work on: it commits its next
 * batches and its relay tries to deliver them. On the retry's file its commits are refused at once; on
 * its own, the server fences its deliveries, and it learns so.
 */
export async function zombieWorks(scene: Scene, task: SimTask, machine: Machine, batches: number, checkpointsOnly: boolean, retryFirst: 'batch' | 'checkpoint', thenBack: boolean): Promise<void> {
  if (task.over) return;
  if (!live(task.zombie)) await task.startZombie(machine);
  const { current, zombie } = task;
  if (!live(zombie) || zombie.ended) return;
  // The retry's first delivery: a batch, or a checkpoint alone (a batch that brought no data): either
  // moves the run's epoch to the retry, and fences the zombie.
  if (retryFirst === 'batch' && task.commit(current) === undefined) return;
  if (!task.commitSeen(current)) return;
  await scene.deliverAll([current]);
  const label = `${task.tenant.name}/${task.name}`;
  for (let i = 0; i < batches; i++) {
    const committed = checkpointsOnly ? task.commitSeen(zombie) : task.commit(zombie) !== undefined;
    if (zombie.path === current.path && !current.crashed) {
      expect('G10', !committed, () => `${label}: attempt ${zombie.attempt} committed on the file attempt ${current.attempt} opened`);
    }
    if (!committed) {
      scene.world.happened(`zombie's commit refused (${zombie.path === current.path ? "on its retry's file" : 'fenced already'})`);
      return;
    }
  }
  // The run's other tasks on the zombie's file commit a batch each, not yet delivered: the zombie's fence
  // parks its own rows, never theirs, though they may carry its attempt number (G10, G12).
  for (const sibling of scene.tasks.filter((other) => other !== task && live(other.current) && !other.current.ended && other.current.path === zombie.path)) {
    if (sibling.commit(sibling.current) !== undefined) scene.world.happened("a zombie's run-mate committed on its file before its fence");
  }
  await deliversUntilFenced(scene, task, zombie);
  // The server knew of the newer attempt before the zombie's commits reached it: it must have fenced them.
  expect('G10', zombie.fenced || zombie.crashed, () => `${label}: attempt ${zombie.attempt}'s ${checkpointsOnly ? 'checkpoint updates' : 'batches'} were taken after attempt ${current.attempt} delivered`);
  scene.world.happened(`zombie fenced by the server after its retry delivered (${checkpointsOnly ? 'checkpoints only' : 'batches'})`);
  if (thenBack && zombie.path !== current.path) {
    // The next retry lands on the zombie's machine: its file's checkpoint counts the batches the zombie
    // committed, so the retry must take over and deliver the rows the fence parked (G12), not redo them.
    await task.retryAt(zombie.path);
    scene.world.happened("a retry took over a fenced zombie's parked rows");
  }
}

/**
 * A job process frozen after its `hit`-th batch (SIGSTOP: a paused VM) loses its heartbeat; the runner
 * starts the next attempt on the same machine or a fresh one, which delivers first a batch, or only
 * its last batch's event announced again (a duplicate on the server: the retry's request stores
 * nothing, and still moves the run's epoch), or announced to the misspelt asset (refused while it is
 * unknown: a request of one refusal moves the epoch too); then the frozen process goes on, and must
 * learn that it is fenced (G10) without any of its later batches taken (the checker's G3 and G10).
 * A misspelt announcement is then fixed as its refusal says.
 */
export async function frozenBesideRetry(scene: Scene, task: SimTask, machine: 'same' | 'fresh', hit: number, more: number, retryFirst: 'batch' | 'announcement' | 'misspelt announcement'): Promise<void> {
  // An announcement again needs a batch the server holds: the task delivers what it committed, or
  // commits a batch and delivers it first when it has none.
  if (retryFirst !== 'batch' && live(task.current) && !task.current.ended) {
    if (task.batch(task.current) === 0) task.commit(task.current);
    await scene.deliverAll([task.current]);
  }
  const machineOfFrozen = task.current.path;
  const frozen = await task.freeze(hit, more);
  if (frozen === undefined) return;
  try {
    await task.retry(machine);
    const announced = retryFirst !== 'batch' && task.announceAgain(task.current, { typo: retryFirst === 'misspelt announcement' });
    if (!announced && task.commit(task.current) === undefined) task.commitSeen(task.current);
    await scene.deliverAll([task.current]);
    await task.thaw(frozen, machineOfFrozen);
    if (announced && retryFirst === 'misspelt announcement') {
      await task.fixTypo();
      await scene.deliverAll([task.current]);
    }
  } finally {
    if (frozen.running()) await frozen.stop('SIGKILL');
  }
}

/**
 * Attempts claimed from the server, as runners whose counters cannot be trusted open them: the retry
 * claims its attempt (the next the server hands out, or exactly the runner's number); then a copy of it
 * starts elsewhere proposing the same number, is refused and asked again, and runs as the newest (G26);
 * the attempt it found, fenced by that claim, commits and delivers, and must learn that it is fenced (G10).
 */
export async function claimedRetries(scene: Scene, task: SimTask, machine: Machine, claim: 'claim' | 'exactly'): Promise<void> {
  if (task.over) return;
  await task.claimedRetry(machine, claim);
  await task.copyClaimsSameNumber();
  const { zombie } = task;
  if (!live(zombie) || zombie.ended || task.commit(zombie) === undefined) return;
  await deliversUntilFenced(scene, task, zombie);
  expect('G10', zombie.fenced || zombie.crashed, () => `${task.tenant.name}/${task.name}: attempt ${zombie.attempt} delivered after attempt ${task.current.attempt} claimed the run`);
  scene.world.happened('a zombie fenced by a claim');
}

/** A zombie's relay goes on until it is told it is fenced (its rows parked), or has nothing left to send. */
async function deliversUntilFenced(scene: Scene, task: SimTask, zombie: Attempt): Promise<void> {
  for (let round = 0; live(zombie) && zombie.box.file.pendingCount() > 0; round++) {
    await task.step(zombie, 'forward');
    expect('liveness', round < STUCK_AFTER_ROUNDS, () => `${task.tenant.name}/${task.name}: the zombie's relay neither delivered nor learnt of its fence in ${STUCK_AFTER_ROUNDS} rounds`);
    // Another relay may hold a shared file's lease: it lapses with time.
    if (zombie.box.file.pendingCount() > 0) scene.world.clock += 1001;
  }
}
