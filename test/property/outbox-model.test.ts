import Database from 'better-sqlite3';
import fc from 'fast-check';
import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createServer, type OnceboxServer } from '../../src/dedupe/index.js';
import { FencedError, LifecycleAsset, openOutbox, RunEndedError, type LifecycleExtra, type Outbox } from '../../src/outbox/index.js';
import { Relay } from '../../src/outbox/relay/relay.js';
import { DeliveryError, ServerClient } from '../../src/client/server-client.js';
import type { StreamState } from '../../src/protocol/wire.js';
import { startFaultProxy, type Fault, type FaultProxy } from '../support/fault-proxy.js';
import { allEvents, allRejections } from '../support/server.js';
import { tempDir } from '../support/temp.js';
import type { Attempt } from '../../sim/jobs.js';

/**
 * Model-based test of the whole path: the outbox, its relay and the server, with every fault we know of
 * interleaved at random. A run has one, two or three tasks (a run's identity is producer, workflow, run
 * and task), in one outbox file they share or in a file each. Each task works through a backlog of
 * batches; its batch b emits the partitions `<task>.b-0 … <task>.b-k` (k fixed by b, so a re-run emits
 * the same identities) and sets the task's checkpoint to b. Every command below names the task it acts
 * on; the tasks commit, retry, fence and resume independently.
 *
 * Commands: commits; relay steps through a proxy that drops requests, drops responses after the server
 * stored the batch, duplicates them, or holds them and delivers them late (reordered); the relay's own
 * run() loop with its retries and backoff; crash-restart of the producer and of the relay; server
 * restarts, and the server losing its store or being restored from an older snapshot; a retry on a fresh
 * machine (the file lost); a retry reopening the same file with a higher attempt; a zombie attempt
 * still running beside its retry, on another machine or on the same file; a retry that comes back
 * to the zombie's machine; and the ends of attempts (`complete`, `fail` with and without a retry to come,
 * by the current attempt or by a zombie), with every attempt opened as the BullMQ adapter opens them, noting
 * the fence of a predecessor that never ended.
 *
 * Invariants, checked after every command and for each task's stream:
 * - the server's events are a prefix of the backlog's partitions, in batch order: each at most once;
 *   and no event of one task carries another task's partitions;
 * - their attempts never go down: no item of a zombie is accepted after its retry delivered;
 * - the server's checkpoint copy is never ahead of its events: a copy at batch m means every partition
 *   of batches 1..m is stored;
 * - the copy never moves backwards: the (attempt, seq) that wrote it only grows, and while the attempt
 *   stays the same its value only grows;
 * - the stream's epoch never goes down;
 * - one lifecycle notice per attempt (a failure or a fence) and one success per task, each naming the
 *   attempt it was committed by, whichever attempt delivered it; the server refused nothing (a zombie's
 *   items are fenced, not refused).
 * The checkpoint and epoch checks are measured against what the server still holds: a restore from a snapshot resets them.
 * At the end each task's latest attempt finishes its backlog as far as anyone committed it (after a store was
 * lost, by the documented recovery: a retry on a fresh file), and after a drain the server holds exactly
 * that prefix.
 *
 * ONCEBOX_SEED replays a run; ONCEBOX_RUNS sets how many (`npm run test:model -- --runs N` for long
 * campaigns).
 */

const SEED = Number(process.env.ONCEBOX_SEED ?? Date.now() % 2 ** 31);
const RUNS = Number(process.env.ONCEBOX_RUNS ?? 50);
const MAX_COMMANDS = 60;
const LEASE_TTL_MS = 1000;
const RUN_ID = 'r';
const PRODUCER = 'model';
/** The names a run's tasks take; a run of one task has none, the path most jobs take. */
const TASK_NAMES = ['extract', 'load', 'notify'];

/** How a run is laid out: how many tasks, and whether they start in one outbox file. */
interface Layout {
  tasks: number;
  sharedFile: boolean;
}

const SINGLE_TASK: Layout = { tasks: 1, sharedFile: false };

const partitionsOf = (task: string | undefined, batch: number) =>
  Array.from({ length: 1 + (batch % 3) }, (_, e) => `${task === undefined ? '' : `${task}.`}${batch}-${e}`);
const backlogUpTo = (task: string | undefined, batch: number) => Array.from({ length: batch }, (_, i) => partitionsOf(task, i + 1)).flat();

/** One process of a task, driven step by step: the same as the whole-system simulation's. */
type Producer = Attempt;

/** One task of the run: its current attempt, and an earlier one still running beside it. */
interface Task {
  name: string | undefined;
  current: Producer;
  zombie: Producer | undefined;
  /** What the server held of this task's stream at the last check, to catch a step backwards. */
  seen: Seen;
}

interface Model {
  /** The furthest batch any attempt of each task committed, by task index. */
  furthest: number[];
}

interface Seen {
  epoch: number;
  checkpoint: { attempt: number; seq: number; batch: number } | undefined;
}

const progressSchema = z.object({ batch: z.number().int() });

class System {
  server!: OnceboxServer;
  proxy!: FaultProxy;
  url = '';
  clock = 1_000_000;
  tasks: Task[] = [];
  readonly dir = tempDir();
  readonly serverPath = join(this.dir, 'server.db');
  readonly snapshotPath = join(this.dir, 'snapshot.db');
  hasSnapshot = false;
  /** The last restore took back something the server had acknowledged. */
  storeLost = false;
  private files = 0;

  constructor(readonly layout: Layout) {}

  async start(): Promise<void> {
    await this.startServer();
    this.proxy = await startFaultProxy(this.url);
    const shared = this.newPath();
    const names = this.layout.tasks === 1 ? [undefined] : TASK_NAMES.slice(0, this.layout.tasks);
    for (const name of names) {
      const current = await this.openProducer(name, this.layout.sharedFile ? shared : this.newPath(), 1);
      this.tasks.push({ name, current, zombie: undefined, seen: { epoch: 0, checkpoint: undefined } });
    }
  }

  /** The task a command's index names: commands are drawn before the layout, so the index wraps. */
  task(index: number): Task {
    return this.tasks[index % this.tasks.length]!;
  }

  newPath(): string {
    return join(this.dir, `outbox-${this.files++}.db`);
  }

  async startServer(): Promise<void> {
    this.server = await createServer({ db: this.serverPath, assets: ['batch_ready'], durability: 'normal', compactEveryMs: 0 });
    this.url = await this.server.listen();
    this.proxy?.setUpstream(this.url);
  }

  /** A job process: an outbox (resuming from the server when the file is fresh) and its own relay. */
  async openProducer(task: string | undefined, path: string, attempt: number): Promise<Producer> {
    const box = await openOutbox({
      path,
      server: this.proxy.url,
      relay: 'manual',
      producer: PRODUCER,
      run: { workflow: 'w', runId: RUN_ID, task, attempt },
      durability: 'normal',
      now: () => this.clock,
      noteFenced: true,
    });
    return { box, relay: this.newRelay(box), attempt, path, crashed: false, fenced: false, ended: false, token: '' };
  }

  newRelay(box: Outbox): Relay {
    return new Relay(box.file, {
      client: new ServerClient({ servers: [this.proxy.url], requestTimeoutMs: 5000 }),
      batchMaxRows: 3,
      batchMaxBytes: 1 << 20,
      retryMinDelayMs: 1,
      retryMaxDelayMs: 5,
      leaseTtlMs: LEASE_TTL_MS,
      now: () => this.clock,
    });
  }

  latestAttempt(task: Task): number {
    return Math.max(task.current.attempt, task.zombie?.attempt ?? 0);
  }

  /** Every process still running, of every task. */
  producers(): Producer[] {
    return this.tasks.flatMap((task) => [task.current, ...(task.zombie ? [task.zombie] : [])]);
  }

  /** The task's next batch: write the data (nothing to do here), then commit checkpoint and emissions. */
  commitNext(task: Task, producer: Producer): number | undefined {
    const progress = producer.box.checkpoint('progress', progressSchema);
    const batch = (progress.get()?.batch ?? 0) + 1;
    const asset = producer.box.asset('batch_ready');
    try {
      producer.box.commit((tx) => {
        tx.set(progress, { batch });
        for (const partitionKey of partitionsOf(task.name, batch)) tx.emit(asset, { partitionKey });
      });
    } catch (error) {
      if (error instanceof RunEndedError) return undefined;
      if (!(error instanceof FencedError)) throw error;
      producer.fenced = true;
      return undefined;
    }
    return batch;
  }

  /** The attempt ends: its success, or its failure with or without a retry to come. */
  endRun(producer: Producer, how: Ending): void {
    if (producer.crashed || producer.fenced || producer.ended) return;
    try {
      if (how === 'complete') producer.box.complete();
      else producer.box.fail(new Error(`attempt ${producer.attempt} failed`), undefined, { willRetry: how === 'fail with a retry' });
    } catch (error) {
      // Restarted with the same attempt after its end (crashRestartProducer), it is told so.
      if (error instanceof RunEndedError) {
        producer.ended = true;
        return;
      }
      if (!(error instanceof FencedError)) throw error;
      producer.fenced = true;
      return;
    }
    producer.ended = true;
  }

  /**
   * One delivery attempt through the proxy with `fault`; failures are the point, not errors. A row the
   * step marks delivered must be on the server: the relay marks a row only with the server's receipt
   * for its key, never on a timeout, a refusal or a gap. On a shared file the step delivers whichever
   * task's rows come first.
   */
  async step(producer: Producer, fault: Fault): Promise<void> {
    const deliveredBefore = new Set(deliveredKeys(producer));
    this.proxy.plan(fault);
    await producer.relay.step().catch((error: { code?: string }) => {
      if (error instanceof FencedError) {
        producer.fenced = true;
        return;
      }
      // A failed request is retried by the next step. Another relay may hold the file's lease (a zombie
      // or another task on the same file), or the store may have lost our stream (the relay stops on it).
      if (!(error instanceof DeliveryError) && !['lease_lost', 'stream_state_lost'].includes(error.code ?? '')) throw error;
    });
    this.proxy.clearPlan(); // nothing left over for the next step
    const marked = deliveredKeys(producer).filter((key) => !deliveredBefore.has(key));
    if (marked.length > 0) {
      const stored = new Set((await allEvents(this.url)).map((event) => event.key));
      expect(marked.filter((key) => !stored.has(key)), 'rows marked delivered without the event on the server').toEqual([]);
    }
  }

  /** The relay's own loop, with its retries and backoff, until the file is drained or the relay stops. */
  async runRelay(producer: Producer, faults: Fault[]): Promise<Relay> {
    this.clock += LEASE_TTL_MS + 1; // any other relay's lease has run out
    this.proxy.plan(...faults);
    producer.relay.start();
    for (let waited = 0; waited < 3000 && producer.relay.failure === undefined; waited += 10) {
      if (producer.box.status().pending + producer.box.status().pendingCheckpoints === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await producer.relay.stop();
    this.proxy.clearPlan();
    return this.newRelay(producer.box);
  }

  /** A crash: the handle is dropped without draining or releasing the lease; the file is all that is left. */
  crash(producer: Producer | undefined): void {
    if (!producer || producer.crashed) return;
    producer.crashed = true;
    producer.box.file.close();
  }

  async mirror(task: Task): Promise<number> {
    const query = task.name === undefined ? '' : `?task=${task.name}`;
    const response = await fetch(`${this.url}/v1/streams/${PRODUCER}/${RUN_ID}${query}`);
    if (response.status === 404) return 0;
    const state = (await response.json()) as StreamState;
    return (state.checkpoints.progress as { batch: number } | undefined)?.batch ?? 0;
  }

  /** The server's epoch and the position that last wrote the task's checkpoint copy, read from its store. */
  readServerStream(task: Task): Seen {
    const db = new Database(this.serverPath, { readonly: true, fileMustExist: true });
    try {
      const stream = [PRODUCER, RUN_ID, task.name ?? ''];
      const epoch = (db.prepare('SELECT epoch FROM streams WHERE producer = ? AND run_id = ? AND task = ?').pluck().get(...stream) as number | undefined) ?? 0;
      const row = db
        .prepare("SELECT attempt, seq, value FROM stream_checkpoints WHERE producer = ? AND run_id = ? AND task = ? AND name = 'progress'")
        .get(...stream) as { attempt: number; seq: number; value: string } | undefined;
      return { epoch, checkpoint: row && { attempt: row.attempt, seq: row.seq, batch: JSON.parse(row.value).batch } };
    } finally {
      db.close();
    }
  }

  /**
   * When the file's next row is past what the restored store holds of its stream, the relay's next
   * step must throw stream_state_lost and mark nothing (`step` checks every row it marks is stored).
   */
  async expectStopOnLostStream(producer: Producer): Promise<void> {
    const next = producer.box.file.db.prepare("SELECT task, attempt, seq FROM outbox WHERE state = 'pending' ORDER BY id LIMIT 1").get() as
      | { task: string; attempt: number; seq: number }
      | undefined;
    if (!next) return;
    const db = new Database(this.serverPath, { readonly: true, fileMustExist: true });
    const lastSeq =
      (db.prepare('SELECT last_seq FROM stream_seqs WHERE producer = ? AND run_id = ? AND task = ? AND attempt = ?').pluck().get(PRODUCER, RUN_ID, next.task, next.attempt) as
        | number
        | undefined) ?? 0;
    db.close();
    if (next.seq <= lastSeq + 1) return;
    this.clock += LEASE_TTL_MS + 1;
    this.proxy.clearPlan();
    const pendingBefore = producer.box.status().pending + producer.box.status().pendingCheckpoints;
    const stepFailure = () => producer.relay.step().then(() => undefined, (error: unknown) => error as { code?: string });
    let failure = await stepFailure();
    // On a shared file another task's relay may have taken the lease since; this relay asks for it again.
    if (failure?.code === 'lease_lost') failure = await stepFailure();
    expect(failure).toMatchObject({ code: 'stream_state_lost' });
    expect(producer.box.status().pending + producer.box.status().pendingCheckpoints).toBe(pendingBefore);
  }

  /** How much the server has acknowledged: stream positions taken (events, checkpoint updates, refusals). */
  acknowledged(): number {
    const db = new Database(this.serverPath, { readonly: true, fileMustExist: true });
    try {
      return (db.prepare('SELECT coalesce(sum(last_seq), 0) FROM stream_seqs').pluck().get() as number) + (db.prepare('SELECT count(*) FROM events').pluck().get() as number);
    } finally {
      db.close();
    }
  }

  /** The server restarts; with `restore`, its store comes back as it was at the snapshot (or empty). */
  async restartServer(options: { snapshot?: boolean; restore?: boolean } = {}): Promise<void> {
    const before = this.acknowledged();
    await this.server.close();
    if (options.restore) {
      this.proxy.discardHeld();
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${this.serverPath}${suffix}`, { force: true });
      if (this.hasSnapshot) copyFileSync(this.snapshotPath, this.serverPath);
      await this.startServer();
      this.storeLost = this.acknowledged() < before;
      for (const task of this.tasks) task.seen = this.readServerStream(task);
      return;
    }
    if (options.snapshot) {
      copyFileSync(this.serverPath, this.snapshotPath);
      this.hasSnapshot = true;
    }
    await this.startServer();
  }

  /**
   * The retries of `tasks` start on a fresh machine, each with the next attempt of its task: in one new
   * file they share when the layout shares one, else in a file each.
   */
  async retryOnFreshMachine(tasks: Task[]): Promise<void> {
    const shared = this.newPath();
    for (const task of tasks) {
      this.crash(task.current);
      task.current = await this.openProducer(task.name, this.layout.sharedFile ? shared : this.newPath(), this.latestAttempt(task) + 1);
    }
  }

  async stop(): Promise<void> {
    for (const producer of this.producers()) this.crash(producer);
    await this.proxy.close();
    await this.server.close();
  }
}

/** The keys of the event rows a producer's file holds as delivered. */
function deliveredKeys(producer: Producer): string[] {
  if (producer.crashed) return [];
  return producer.box.file.db.prepare("SELECT key FROM outbox WHERE kind = 'event' AND state = 'delivered'").pluck().all() as string[];
}

/** The rows of the task's current attempt its file has not delivered. */
function undeliveredOf(task: Task): unknown[] {
  const sql = "SELECT kind, seq, state FROM outbox WHERE task = ? AND attempt = ? AND state <> 'delivered'";
  return task.current.box.file.db.prepare(sql).all(task.name ?? '', task.current.attempt);
}

function parkedRows(producer: Producer): { task: string; attempt: number; dead_code: string }[] {
  return producer.box.file.db.prepare("SELECT task, attempt, dead_code FROM outbox WHERE state = 'dead'").all() as { task: string; attempt: number; dead_code: string }[];
}

type Command = fc.AsyncCommand<Model, System>;
type Ending = 'complete' | 'fail with a retry' | 'fail for good';

const command = (name: string, run: (model: Model, real: System) => Promise<void> | void): Command => ({
  check: () => true,
  run: async (model, real) => run(model, real),
  toString: () => name,
});

/** A command on the task at `index` (wrapped to the run's task count); its name shows the index. */
const onTask = (name: string, index: number, run: (task: Task, model: Model, real: System) => Promise<void> | void): Command =>
  command(`${name}[${index}]`, (model, real) => run(real.task(index), model, real));

const live = (producer: Producer | undefined): producer is Producer => producer !== undefined && !producer.crashed && !producer.fenced;

const record = (model: Model, real: System, task: Task, batch: number | undefined) => {
  const index = real.tasks.indexOf(task);
  if (batch !== undefined) model.furthest[index] = Math.max(model.furthest[index] ?? 0, batch);
};

const commit = (index = 0) => onTask('commit', index, (task, model, real) => record(model, real, task, real.commitNext(task, task.current)));

const zombieCommit = (index = 0) =>
  onTask('zombieCommit', index, (task, model, real) => {
    if (live(task.zombie)) record(model, real, task, real.commitNext(task, task.zombie));
  });

const endRun = (how: Ending, index = 0) => onTask(`endRun(${how})`, index, (task, _model, real) => real.endRun(task.current, how));

const zombieEndRun = (how: Ending, index = 0) =>
  onTask(`zombieEndRun(${how})`, index, (task, _model, real) => {
    if (live(task.zombie)) real.endRun(task.zombie, how);
  });

const step = (fault: Fault, index = 0) => onTask(`step(${fault})`, index, (task, _model, real) => real.step(task.current, fault));

const zombieStep = (fault: Fault, index = 0) =>
  onTask(`zombieStep(${fault})`, index, async (task, _model, real) => {
    if (live(task.zombie)) await real.step(task.zombie, fault);
  });

const runRelay = (faults: Fault[], index = 0) =>
  onTask(`runRelay(${faults.join(',')})`, index, async (task, _model, real) => {
    task.current.relay = await real.runRelay(task.current, faults);
  });

const releaseHeld = command('releaseHeld', (_model, real) => real.proxy.releaseHeld());

const crashRestartProducer = (index = 0) =>
  onTask('crashRestartProducer', index, async (task, _model, real) => {
    const before = task.current;
    real.crash(before);
    real.clock += LEASE_TTL_MS + 1; // the dead process's lease runs out
    task.current = await real.openProducer(task.name, before.path, before.attempt);
  });

const crashRestartRelay = (index = 0) =>
  onTask('crashRestartRelay', index, (task, _model, real) => {
    real.clock += LEASE_TTL_MS + 1;
    task.current.relay = real.newRelay(task.current.box);
  });

const serverRestart = command('serverRestart', (_model, real) => real.restartServer());
const serverSnapshot = command('serverSnapshot', (_model, real) => real.restartServer({ snapshot: true }));
/**
 * The server is restored from its last snapshot (or loses its store when there is none); requests in
 * flight are lost with the old server. When that took back something acknowledged, a relay whose
 * stream is now behind must stop on stream_state_lost with nothing marked. Then the operator follows
 * docs/operations.md: every job stops, and every task of the run is retried on a fresh file, which
 * resumes from what the restored store holds and re-publishes the rest. (A stream the restore did not
 * touch could still deliver, past events another stream lost: that is why every job stops.)
 */
const serverRestore = command('serverRestore', async (_model, real) => {
  await real.restartServer({ restore: true });
  if (!real.storeLost) return;
  const files = new Map(real.tasks.map((task) => [task.current.path, task.current]));
  for (const producer of files.values()) await real.expectStopOnLostStream(producer);
  for (const task of real.tasks) {
    real.crash(task.zombie);
    task.zombie = undefined;
  }
  await real.retryOnFreshMachine(real.tasks);
  real.storeLost = false;
});

/**
 * The machine is lost with its file and whatever else ran there (on a shared file, other tasks and
 * their zombies); the retries of the tasks that ran there start on a fresh one.
 */
const loseFile = (index = 0) =>
  onTask('loseFile', index, async (task, _model, real) => {
    const lost = task.current.path;
    for (const producer of real.producers()) if (producer.path === lost) real.crash(producer);
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${lost}${suffix}`, { force: true });
    await real.retryOnFreshMachine(real.tasks.filter((each) => each.current.path === lost));
  });

/** A retry on the same machine: the task died, and its next attempt reopens the same file. */
const reopenHigher = (index = 0) =>
  onTask('reopenHigher', index, async (task, _model, real) => {
    const before = task.current;
    real.crash(before);
    real.clock += LEASE_TTL_MS + 1;
    task.current = await real.openProducer(task.name, before.path, real.latestAttempt(task) + 1);
  });

/** The task's current attempt lost its heartbeat, not its process: its retry starts beside it. */
const startZombie = (sameFile: boolean, index = 0) =>
  onTask(sameFile ? 'startZombieOnSameFile' : 'startZombieOnFreshMachine', index, async (task, _model, real) => {
    real.crash(task.zombie);
    task.zombie = task.current;
    task.current = await real.openProducer(task.name, sameFile ? task.zombie.path : real.newPath(), real.latestAttempt(task) + 1);
  });

/** The task's next retry is scheduled on its zombie's machine and opens its file; the current attempt is gone. */
const retryOnZombieMachine = (index = 0) =>
  onTask('retryOnZombieMachine', index, async (task, _model, real) => {
    const zombie = task.zombie;
    if (!zombie || zombie.path === task.current.path) return;
    real.crash(task.current);
    real.clock += LEASE_TTL_MS + 1;
    task.current = await real.openProducer(task.name, zombie.path, real.latestAttempt(task) + 1);
  });

async function expectInvariants(real: System): Promise<string[][]> {
  const events = await allEvents(real.url);
  const byTask: string[][] = [];
  const batches = events.filter((event) => event.asset === 'batch_ready');
  for (const task of real.tasks) {
    const own = batches.filter((event) => (event.task ?? undefined) === task.name);
    const stored = own.map((event) => event.partitionKey!);
    const label = task.name ?? 'the run';
    expect(stored, `${label}: events are a prefix of its backlog, each once`).toEqual(backlogUpTo(task.name, 200).slice(0, stored.length));
    // Fencing: once an attempt of the task has delivered, no earlier attempt gets another event in.
    const attempts = own.map((event) => event.attempt);
    expect(attempts, `${label}: attempts of stored events never go down`).toEqual([...attempts].sort((a, b) => a - b));
    expect(stored.length, `${label}: the checkpoint copy is never ahead of the events`).toBeGreaterThanOrEqual(backlogUpTo(task.name, await real.mirror(task)).length);

    const now = real.readServerStream(task);
    expect(now.epoch, `${label}: the epoch never goes down`).toBeGreaterThanOrEqual(task.seen.epoch);
    const before = task.seen.checkpoint;
    if (before) {
      expect(now.checkpoint, `${label}: the checkpoint copy does not disappear`).toBeDefined();
      const { attempt, seq, batch } = now.checkpoint!;
      const forward = attempt > before.attempt || (attempt === before.attempt && seq >= before.seq);
      expect(forward, `${label}: the checkpoint copy moved back from ${JSON.stringify(before)} to ${JSON.stringify(now.checkpoint)}`).toBe(true);
      if (attempt === before.attempt) expect(batch, `${label}: within an attempt the copy only grows`).toBeGreaterThanOrEqual(before.batch);
    }
    task.seen = now;
    byTask.push(stored);

    // G25 beside G12: however a notice travelled (delivered by its own attempt, taken over by a retry
    // on the same file, sent after a zombie was fenced), each attempt has one, naming itself.
    const notices = events.filter((event) => event.asset.startsWith('oncebox.run_') && (event.task ?? undefined) === task.name);
    const about = notices.filter((event) => event.asset !== LifecycleAsset.Succeeded).map((event) => (event.extra as unknown as LifecycleExtra).attempt!);
    expect(about, `${label}: one failure or fence notice per attempt`).toEqual([...new Set(about)]);
    expect(notices.filter((event) => event.asset === LifecycleAsset.Succeeded).length, `${label}: one success at most`).toBeLessThanOrEqual(1);
    for (const event of notices) {
      const extra = event.extra as unknown as LifecycleExtra;
      if (extra.attempt !== undefined) expect(extra.attempt, `${label}: a notice is of the attempt that delivered it or an earlier one`).toBeLessThanOrEqual(event.attempt);
    }
  }
  expect(batches.length, 'every stored event belongs to one of the run’s tasks').toBe(byTask.flat().length);
  // Every item in the model is well formed and of a registered asset: a refusal is a bug (a zombie's
  // items are fenced, which is not a refusal).
  expect(await allRejections(real.url), 'the server refused nothing').toEqual([]);
  return byTask;
}

const faults: Fault[] = ['drop-request', 'drop-response', 'duplicate', 'hold', 'fail-503'];
const taskIndex = fc.nat({ max: TASK_NAMES.length - 1 });
const endings = fc.constantFrom<Ending>('complete', 'fail with a retry', 'fail for good');
const onAnyTask = <T,>(make: (value: T, index: number) => Command, values: fc.Arbitrary<T>) => fc.tuple(values, taskIndex).map(([value, index]) => make(value, index));

// Weighted so that runs get far into the backlog, with enough retries, zombies and losses to matter.
const commands = [
  fc.oneof(
    { arbitrary: taskIndex.map(commit), weight: 5 },
    { arbitrary: taskIndex.map((index) => step('forward', index)), weight: 4 },
    { arbitrary: onAnyTask(step, fc.constantFrom(...faults)), weight: 2 },
    { arbitrary: onAnyTask(runRelay, fc.array(fc.constantFrom(...faults), { maxLength: 3 })), weight: 1 },
    { arbitrary: fc.constant(releaseHeld), weight: 1 },
    { arbitrary: taskIndex.map(zombieCommit), weight: 3 },
    { arbitrary: onAnyTask(endRun, endings), weight: 1 },
    { arbitrary: onAnyTask(zombieEndRun, endings), weight: 1 },
    { arbitrary: onAnyTask(zombieStep, fc.constantFrom<Fault>('forward', 'forward', 'drop-response', 'hold')), weight: 3 },
    {
      arbitrary: onAnyTask((make, index) => make(index), fc.constantFrom((i: number) => startZombie(true, i), (i: number) => startZombie(false, i), reopenHigher, retryOnZombieMachine)),
      weight: 2,
    },
    { arbitrary: fc.oneof(onAnyTask((make, index) => make(index), fc.constantFrom(crashRestartProducer, crashRestartRelay, loseFile)), fc.constant(serverRestart)), weight: 1 },
    { arbitrary: fc.constantFrom(serverSnapshot, serverSnapshot, serverRestore), weight: 1 },
  ),
];

/** Runs `cmds` against a fresh system, checking the invariants after each, then finishes and drains. */
async function runScenario(cmds: Iterable<Command>, layout: Layout = SINGLE_TASK): Promise<System> {
  const real = new System(layout);
  await real.start();
  const model: Model = { furthest: real.tasks.map(() => 0) };
  try {
    for (const cmd of cmds) {
      await cmd.run(model, real);
      await expectInvariants(real);
    }
    // The jobs end: the zombies die, and each task's latest attempt finishes its backlog as far as
    // anyone got; then everything drains.
    for (const task of real.tasks) real.crash(task.zombie);
    real.clock += LEASE_TTL_MS + 1;
    await real.proxy.releaseHeld();
    for (const [index, task] of real.tasks.entries()) {
      // An attempt that ended commits nothing more: the run's next attempt finishes the backlog.
      if (task.current.ended) await reopenHigher(index).run(model, real);
      const progress = task.current.box.checkpoint('progress', progressSchema);
      while ((progress.get()?.batch ?? 0) < model.furthest[index]!) expect(real.commitNext(task, task.current)).toBeDefined();
    }
    const undrained = () => real.tasks.filter((task) => task.current.box.status().pending + task.current.box.status().pendingCheckpoints > 0);
    for (let i = 0; i < 500 && undrained().length > 0; i++) {
      real.clock += LEASE_TTL_MS + 1; // on a shared file, the lease passes between the tasks' relays
      await real.step(undrained()[0]!.current, 'forward');
    }
    const stored = await expectInvariants(real);
    for (const [index, task] of real.tasks.entries()) {
      const label = task.name ?? 'the run';
      expect(stored[index], `${label}: after the drain, every committed batch is stored once, in order`).toEqual(backlogUpTo(task.name, model.furthest[index]!));
      expect(task.current.box.status(), `${label}: nothing is left pending`).toMatchObject({ pending: 0, pendingCheckpoints: 0 });
      // A file's status counts every task's rows; on a shared file, another task's fenced zombie
      // parks its rows there. The latest attempt's own rows are all delivered.
      expect(undeliveredOf(task), `${label}: nothing of the latest attempt is left pending or parked`).toEqual([]);
    }
    // What is parked is a zombie's, refused because a later attempt of its task had begun.
    for (const task of real.tasks) {
      for (const row of parkedRows(task.current)) {
        const owner = real.tasks.find((each) => (each.name ?? '') === row.task)!;
        expect(row.attempt, `a parked row of ${row.task || 'the run'} belongs to an attempt fenced by a later one`).toBeLessThan(owner.current.attempt);
        expect(row.dead_code).toBe('fenced');
      }
    }
    return real;
  } finally {
    await real.stop();
  }
}

const layouts = fc.oneof(
  { arbitrary: fc.constant(SINGLE_TASK), weight: 2 },
  { arbitrary: fc.record({ tasks: fc.integer({ min: 2, max: 3 }), sharedFile: fc.boolean() }), weight: 3 },
);

describe('the outbox, relay and server as one model', () => {

  it('fences a zombie that would otherwise add events after its retry delivered', async () => {
    const real = await runScenario([commit(), step('forward'), startZombie(false), commit(), step('forward'), zombieCommit(), zombieStep('forward'), zombieCommit(), zombieStep('forward')]);
    expect(real.tasks[0]!.zombie?.fenced).toBe(true);
  });

  it('loses nothing when a zombie commits to the file its retry has opened (the lost-emission interleaving)', async () => {
    // Attempt 2 opens attempt 1's file; its relay delivers (the epoch is 2); then the zombie tries the
    // next batch before attempt 2 does, and attempt 2 commits the same batch.
    const real = await runScenario([commit(), step('forward'), startZombie(true), commit(), step('forward'), zombieCommit(), commit(), zombieStep('forward'), step('forward'), commit()]);
    expect(real.tasks[0]!.zombie?.fenced).toBe(true);
  });

  it('stops the relay rather than resend out of order when the store is restored, and recovers with a fresh retry', async () => {
    await runScenario([commit(), step('forward'), serverSnapshot, commit(), commit(), step('forward'), step('forward'), serverRestore, commit(), step('forward')]);
  });

  it('fences one task’s zombie on a file it shares with another task, and leaves the other task’s stream alone', async () => {
    // extract's attempt 1 stalls and its retry opens the shared file; load keeps committing as attempt 1.
    const real = await runScenario(
      [commit(0), commit(1), step('forward', 1), startZombie(true, 0), commit(0), step('forward', 0), zombieCommit(0), commit(1), zombieStep('forward', 0), step('forward', 1), commit(0)],
      { tasks: 2, sharedFile: true },
    );
    expect(real.tasks[0]!.zombie?.fenced).toBe(true);
    expect(real.tasks[1]!.current.attempt).toBe(1);
    expect(real.tasks[1]!.current.fenced).toBe(false);
  });

  it('retries every task of a shared file on a fresh machine when that file is lost, each from its own checkpoint', async () => {
    await runScenario([commit(0), commit(1), commit(2), step('forward', 2), step('forward', 0), commit(1), loseFile(1), commit(0), commit(1), commit(2)], { tasks: 3, sharedFile: true });
  });

  it('a relay that lost the shared file’s lease to another task’s relay takes it back at its next step', async () => {
    // Found by the property on a shared file: extract's relay held the lease, load's relay ran (taking
    // it once it expired) and stopped, and extract's later steps all failed on the lease it had lost.
    await runScenario([step('forward', 0), runRelay([], 1), commit(0), step('forward', 0)], { tasks: 2, sharedFile: true });
  });

  it('delivers the notice of an attempt that ended and died before its relay sent it, from the retry that takes its file over', async () => {
    await runScenario([commit(), endRun('fail with a retry'), reopenHigher(), commit(), step('forward'), endRun('fail for good'), reopenHigher(), step('forward'), commit(), endRun('complete')]);
  });

  it('delivers a fence notice the next attempt took over, and notes its own predecessor’s', async () => {
    // Attempt 2 notes attempt 1's fence and dies before sending it; attempt 3 sends it, and notes 2's.
    await runScenario([commit(), reopenHigher(), reopenHigher(), step('forward'), step('forward')], { tasks: 2, sharedFile: true });
  });

  it(`delivers every committed emission exactly once, in order, per task, through crashes, zombies, lost files and stores, and network faults (seed ${SEED})`, async () => {
    console.log(`outbox-model: seed ${SEED}, ${RUNS} runs of up to ${MAX_COMMANDS} commands (ONCEBOX_SEED=${SEED} to replay)`);
    const lengths: number[] = [];
    const shapes = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(layouts, fc.commands(commands, { maxCommands: MAX_COMMANDS, size: 'max' }), async (layout, cmds) => {
        const list = [...cmds];
        lengths.push(list.length);
        const shape = layout.tasks === 1 ? '1 task' : `${layout.tasks} tasks, ${layout.sharedFile ? 'one file' : 'a file each'}`;
        shapes.set(shape, (shapes.get(shape) ?? 0) + 1);
        await runScenario(list, layout);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: process.env.ONCEBOX_SHRINK === undefined },
    );
    lengths.sort((a, b) => a - b);
    console.log(`outbox-model: commands per run: median ${lengths[Math.floor(lengths.length / 2)]}, max ${lengths.at(-1)}; runs by layout: ${[...shapes].map(([shape, n]) => `${shape} ${n}`).join(', ')}`);
  }, Math.max(300_000, RUNS * 10_000));
});
