import Database from 'better-sqlite3';
import fc from 'fast-check';
import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createServer, type OnceboxServer } from '../../src/dedupe/index.js';
import { FencedError, openOutbox, type Outbox } from '../../src/outbox/index.js';
import { Relay } from '../../src/outbox/relay.js';
import { DeliveryError, ServerClient } from '../../src/outbox/server-client.js';
import type { StreamState } from '../../src/protocol/wire.js';
import { startFaultProxy, type Fault, type FaultProxy } from '../support/fault-proxy.js';
import { allEvents } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * Model-based test of the whole path: the outbox, its relay and the server, with every fault we know of
 * interleaved at random. A job works through a backlog of batches; batch b emits the partitions
 * `b-0 … b-k` (k fixed by b, so a re-run emits the same identities) and sets the checkpoint to b.
 *
 * Commands: commits; relay steps through a proxy that drops requests, drops responses after the server
 * stored the batch, duplicates them, or holds them and delivers them late (reordered); the relay's own
 * run() loop with its retries and backoff; crash-restart of the producer and of the relay; server
 * restarts, and the server losing its store or being restored from an older snapshot; a retry on a fresh
 * machine (the file lost); a retry reopening the same file with a higher attempt; a zombie attempt
 * still running beside its retry, on another machine or on the same file; and a retry that comes back
 * to the zombie's machine.
 *
 * Invariants, checked after every command:
 * - the server's events are a prefix of the backlog's partitions, in batch order: each at most once;
 * - their attempts never go down: no item of a zombie is accepted after its retry delivered;
 * - the server's checkpoint copy is never ahead of its events: a copy at batch m means every partition
 *   of batches 1..m is stored;
 * - the copy never moves backwards: the (attempt, seq) that wrote it only grows, and while the attempt
 *   stays the same its value only grows;
 * - the stream's epoch never goes down.
 * The last two are measured against what the server still holds: a restore from a snapshot resets them.
 * At the end the latest attempt finishes the backlog as far as anyone committed it (after a store was
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

const partitionsOf = (batch: number) => Array.from({ length: 1 + (batch % 3) }, (_, e) => `${batch}-${e}`);
const backlogUpTo = (batch: number) => Array.from({ length: batch }, (_, i) => partitionsOf(i + 1)).flat();

interface Producer {
  box: Outbox;
  relay: Relay;
  attempt: number;
  path: string;
  /** Its file is closed: the process is gone. */
  crashed: boolean;
  /** It was told it is fenced (by a commit or by its relay): a job stops then. */
  fenced: boolean;
}

interface Model {
  /** The furthest batch any attempt committed. */
  furthest: number;
}

/** What the server held at the last check, to catch a step backwards. */
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
  current!: Producer;
  zombie: Producer | undefined;
  readonly dir = tempDir();
  readonly serverPath = join(this.dir, 'server.db');
  readonly snapshotPath = join(this.dir, 'snapshot.db');
  hasSnapshot = false;
  /** The last restore took back something the server had acknowledged. */
  storeLost = false;
  seen: Seen = { epoch: 0, checkpoint: undefined };
  private files = 0;

  async start(): Promise<void> {
    await this.startServer();
    this.proxy = await startFaultProxy(this.url);
    this.current = await this.openProducer(this.newPath(), 1);
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
  async openProducer(path: string, attempt: number): Promise<Producer> {
    const box = await openOutbox({
      path,
      server: this.proxy.url,
      relay: 'manual',
      producer: PRODUCER,
      run: { workflow: 'w', runId: RUN_ID, attempt },
      durability: 'normal',
      now: () => this.clock,
    });
    return { box, relay: this.newRelay(box), attempt, path, crashed: false, fenced: false };
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

  get latestAttempt(): number {
    return Math.max(this.current.attempt, this.zombie?.attempt ?? 0);
  }

  /** The job's next batch: write the data (nothing to do here), then commit checkpoint and emissions. */
  commitNext(producer: Producer): number | undefined {
    const progress = producer.box.checkpoint('progress', progressSchema);
    const batch = (progress.get()?.batch ?? 0) + 1;
    const asset = producer.box.asset('batch_ready');
    try {
      producer.box.commit((tx) => {
        tx.set(progress, { batch });
        for (const partitionKey of partitionsOf(batch)) tx.emit(asset, { partitionKey });
      });
    } catch (error) {
      if (!(error instanceof FencedError)) throw error;
      producer.fenced = true;
      return undefined;
    }
    return batch;
  }

  /**
   * One delivery attempt through the proxy with `fault`; failures are the point, not errors. A row the
   * step marks delivered must be on the server: the relay marks a row only with the server's receipt
   * for its key, never on a timeout, a refusal or a gap.
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
      // on the same file), or the store may have lost our stream (the relay stops on it).
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
  async runRelay(producer: Producer, faults: Fault[]): Promise<void> {
    this.clock += LEASE_TTL_MS + 1; // any other relay's lease has run out
    this.proxy.plan(...faults);
    producer.relay.start();
    for (let waited = 0; waited < 3000 && producer.relay.failure === undefined; waited += 10) {
      if (producer.box.status().pending + producer.box.status().pendingCheckpoints === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await producer.relay.stop();
    this.proxy.clearPlan();
    producer.relay = this.newRelay(producer.box);
  }

  /** A crash: the handle is dropped without draining or releasing the lease; the file is all that is left. */
  crash(producer: Producer | undefined): void {
    if (!producer || producer.crashed) return;
    producer.crashed = true;
    producer.box.file.close();
  }

  async mirror(): Promise<number> {
    const response = await fetch(`${this.url}/v1/streams/${PRODUCER}/${RUN_ID}`);
    if (response.status === 404) return 0;
    const state = (await response.json()) as StreamState;
    return (state.checkpoints.progress as { batch: number } | undefined)?.batch ?? 0;
  }

  /** The server's epoch and the position that last wrote its checkpoint copy, read from its store. */
  readServerStream(): Seen {
    const db = new Database(this.serverPath, { readonly: true, fileMustExist: true });
    try {
      const epoch = (db.prepare('SELECT epoch FROM streams WHERE producer = ? AND run_id = ?').pluck().get(PRODUCER, RUN_ID) as number | undefined) ?? 0;
      const row = db
        .prepare("SELECT attempt, seq, value FROM stream_checkpoints WHERE producer = ? AND run_id = ? AND name = 'progress'")
        .get(PRODUCER, RUN_ID) as { attempt: number; seq: number; value: string } | undefined;
      return { epoch, checkpoint: row && { attempt: row.attempt, seq: row.seq, batch: JSON.parse(row.value).batch } };
    } finally {
      db.close();
    }
  }

  /**
   * When the producer's next row is past what the restored store holds of its stream, its relay's next
   * step must throw stream_state_lost and mark nothing (`step` checks every row it marks is stored).
   */
  async expectStopOnLostStream(producer: Producer): Promise<void> {
    const next = producer.box.file.db.prepare("SELECT attempt, seq FROM outbox WHERE state = 'pending' ORDER BY id LIMIT 1").get() as
      | { attempt: number; seq: number }
      | undefined;
    if (!next) return;
    const db = new Database(this.serverPath, { readonly: true, fileMustExist: true });
    const lastSeq = (db.prepare('SELECT last_seq FROM stream_seqs WHERE producer = ? AND run_id = ? AND attempt = ?').pluck().get(PRODUCER, RUN_ID, next.attempt) as number | undefined) ?? 0;
    db.close();
    if (next.seq <= lastSeq + 1) return;
    this.clock += LEASE_TTL_MS + 1;
    this.proxy.clearPlan();
    const pendingBefore = producer.box.status().pending + producer.box.status().pendingCheckpoints;
    await expect(producer.relay.step()).rejects.toMatchObject({ code: 'stream_state_lost' });
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
      this.seen = this.readServerStream();
      return;
    }
    if (options.snapshot) {
      copyFileSync(this.serverPath, this.snapshotPath);
      this.hasSnapshot = true;
    }
    await this.startServer();
  }

  async stop(): Promise<void> {
    this.crash(this.current);
    this.crash(this.zombie);
    await this.proxy.close();
    await this.server.close();
  }
}

/** The keys of the event rows a producer's file holds as delivered. */
function deliveredKeys(producer: Producer): string[] {
  if (producer.crashed) return [];
  return producer.box.file.db.prepare("SELECT key FROM outbox WHERE kind = 'event' AND state = 'delivered'").pluck().all() as string[];
}

type Command = fc.AsyncCommand<Model, System>;

const command = (name: string, run: (model: Model, real: System) => Promise<void> | void): Command => ({
  check: () => true,
  run: async (model, real) => run(model, real),
  toString: () => name,
});

const live = (producer: Producer | undefined): producer is Producer => producer !== undefined && !producer.crashed && !producer.fenced;

const commit = command('commit', (model, real) => {
  const batch = real.commitNext(real.current);
  if (batch !== undefined) model.furthest = Math.max(model.furthest, batch);
});

const zombieCommit = command('zombieCommit', (model, real) => {
  if (!live(real.zombie)) return;
  const batch = real.commitNext(real.zombie);
  if (batch !== undefined) model.furthest = Math.max(model.furthest, batch);
});

const step = (fault: Fault) => command(`step(${fault})`, (_model, real) => real.step(real.current, fault));

const zombieStep = (fault: Fault) =>
  command(`zombieStep(${fault})`, async (_model, real) => {
    if (live(real.zombie)) await real.step(real.zombie, fault);
  });

const runRelay = (faults: Fault[]) => command(`runRelay(${faults.join(',')})`, (_model, real) => real.runRelay(real.current, faults));

const releaseHeld = command('releaseHeld', (_model, real) => real.proxy.releaseHeld());

const crashRestartProducer = command('crashRestartProducer', async (_model, real) => {
  const before = real.current;
  real.crash(before);
  real.clock += LEASE_TTL_MS + 1; // the dead process's lease runs out
  real.current = await real.openProducer(before.path, before.attempt);
});

const crashRestartRelay = command('crashRestartRelay', (_model, real) => {
  real.clock += LEASE_TTL_MS + 1;
  real.current.relay = real.newRelay(real.current.box);
});

const serverRestart = command('serverRestart', (_model, real) => real.restartServer());
const serverSnapshot = command('serverSnapshot', (_model, real) => real.restartServer({ snapshot: true }));
/**
 * The server is restored from its last snapshot (or loses its store when there is none); requests in
 * flight are lost with the old server. When that took back something acknowledged, a relay whose
 * stream is now behind must stop on stream_state_lost with nothing marked. Then the operator follows
 * docs/operations.md: every job stops, and the run is retried on a fresh file, which resumes from what
 * the restored store holds and re-publishes the rest. (A stream the restore did not touch could still
 * deliver, past events another stream lost: that is why every job stops.)
 */
const serverRestore = command('serverRestore', async (_model, real) => {
  await real.restartServer({ restore: true });
  if (!real.storeLost) return;
  await real.expectStopOnLostStream(real.current);
  real.crash(real.zombie);
  real.zombie = undefined;
  real.crash(real.current);
  real.current = await real.openProducer(real.newPath(), real.latestAttempt + 1);
  real.storeLost = false;
});

/** The machine is lost with its file (and whatever else ran there); the retry starts on a fresh one. */
const loseFile = command('loseFile', async (_model, real) => {
  const lost = real.current.path;
  real.crash(real.current);
  if (real.zombie?.path === lost) real.crash(real.zombie);
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${lost}${suffix}`, { force: true });
  real.current = await real.openProducer(real.newPath(), real.latestAttempt + 1);
});

/** A retry on the same machine: the job died, and its next attempt reopens the same file. */
const reopenHigher = command('reopenHigher', async (_model, real) => {
  const before = real.current;
  real.crash(before);
  real.clock += LEASE_TTL_MS + 1;
  real.current = await real.openProducer(before.path, real.latestAttempt + 1);
});

/** The current attempt lost its heartbeat, not its process: its retry starts beside it. */
const startZombie = (sameFile: boolean) =>
  command(sameFile ? 'startZombieOnSameFile' : 'startZombieOnFreshMachine', async (_model, real) => {
    real.crash(real.zombie);
    real.zombie = real.current;
    real.current = await real.openProducer(sameFile ? real.zombie.path : real.newPath(), real.latestAttempt + 1);
  });

/** The next retry is scheduled on the zombie's machine and opens its file; the current attempt is gone. */
const retryOnZombieMachine = command('retryOnZombieMachine', async (_model, real) => {
  const zombie = real.zombie;
  if (!zombie || zombie.path === real.current.path) return;
  real.crash(real.current);
  real.clock += LEASE_TTL_MS + 1;
  real.current = await real.openProducer(zombie.path, real.latestAttempt + 1);
});

async function expectInvariants(real: System): Promise<string[]> {
  const events = await allEvents(real.url);
  const stored = events.map((event) => event.partitionKey!);
  expect(stored, 'events are a prefix of the backlog, each once').toEqual(backlogUpTo(200).slice(0, stored.length));
  // Fencing: once an attempt has delivered, no earlier attempt gets another event in.
  const attempts = events.map((event) => event.attempt);
  expect(attempts, 'attempts of stored events never go down').toEqual([...attempts].sort((a, b) => a - b));
  expect(stored.length, 'the checkpoint copy is never ahead of the events').toBeGreaterThanOrEqual(backlogUpTo(await real.mirror()).length);

  const now = real.readServerStream();
  expect(now.epoch, 'the epoch never goes down').toBeGreaterThanOrEqual(real.seen.epoch);
  const before = real.seen.checkpoint;
  if (before) {
    expect(now.checkpoint, 'the checkpoint copy does not disappear').toBeDefined();
    const { attempt, seq, batch } = now.checkpoint!;
    const forward = attempt > before.attempt || (attempt === before.attempt && seq >= before.seq);
    expect(forward, `the checkpoint copy moved back from ${JSON.stringify(before)} to ${JSON.stringify(now.checkpoint)}`).toBe(true);
    if (attempt === before.attempt) expect(batch, 'within an attempt the copy only grows').toBeGreaterThanOrEqual(before.batch);
  }
  real.seen = now;
  return stored;
}

const faults: Fault[] = ['drop-request', 'drop-response', 'duplicate', 'hold', 'fail-503'];

// Weighted so that runs get far into the backlog, with enough retries, zombies and losses to matter.
const commands = [
  fc.oneof(
    { arbitrary: fc.constant(commit), weight: 5 },
    { arbitrary: fc.constant(step('forward')), weight: 4 },
    { arbitrary: fc.constantFrom(...faults).map(step), weight: 2 },
    { arbitrary: fc.array(fc.constantFrom(...faults), { maxLength: 3 }).map(runRelay), weight: 1 },
    { arbitrary: fc.constant(releaseHeld), weight: 1 },
    { arbitrary: fc.constant(zombieCommit), weight: 3 },
    { arbitrary: fc.constantFrom<Fault>('forward', 'forward', 'drop-response', 'hold').map(zombieStep), weight: 3 },
    { arbitrary: fc.constantFrom(startZombie(true), startZombie(false), reopenHigher, retryOnZombieMachine), weight: 2 },
    { arbitrary: fc.constantFrom(crashRestartProducer, crashRestartRelay, serverRestart, loseFile), weight: 1 },
    { arbitrary: fc.constantFrom(serverSnapshot, serverSnapshot, serverRestore), weight: 1 },
  ),
];

/** Runs `cmds` against a fresh system, checking the invariants after each, then finishes and drains. */
async function runScenario(cmds: Iterable<Command>): Promise<System> {
  const real = new System();
  await real.start();
  const model: Model = { furthest: 0 };
  try {
    for (const cmd of cmds) {
      await cmd.run(model, real);
      await expectInvariants(real);
    }
    // The jobs end: the zombie dies, and the latest attempt finishes.
    real.crash(real.zombie);
    real.clock += LEASE_TTL_MS + 1;
    await real.proxy.releaseHeld();
    // The latest attempt finishes the backlog as far as anyone got, then everything drains.
    const progress = real.current.box.checkpoint('progress', progressSchema);
    while ((progress.get()?.batch ?? 0) < model.furthest) expect(real.commitNext(real.current)).toBeDefined();
    for (let i = 0; i < 500 && real.current.box.status().pending + real.current.box.status().pendingCheckpoints > 0; i++) {
      await real.step(real.current, 'forward');
    }
    const stored = await expectInvariants(real);
    expect(stored, 'after the drain, every committed batch is stored once, in order').toEqual(backlogUpTo(model.furthest));
    expect(real.current.box.status(), 'nothing of the latest attempt is left pending or parked').toMatchObject({ pending: 0, pendingCheckpoints: 0, dead: 0 });
    return real;
  } finally {
    await real.stop();
  }
}

describe('the outbox, relay and server as one model', () => {
  it('fences a zombie that would otherwise add events after its retry delivered', async () => {
    const real = await runScenario([commit, step('forward'), startZombie(false), commit, step('forward'), zombieCommit, zombieStep('forward'), zombieCommit, zombieStep('forward')]);
    expect(real.zombie?.fenced).toBe(true);
  });

  it('loses nothing when a zombie commits to the file its retry has opened (the lost-emission interleaving)', async () => {
    // Attempt 2 opens attempt 1's file; its relay delivers (the epoch is 2); then the zombie tries the
    // next batch before attempt 2 does, and attempt 2 commits the same batch.
    const real = await runScenario([commit, step('forward'), startZombie(true), commit, step('forward'), zombieCommit, commit, zombieStep('forward'), step('forward'), commit]);
    expect(real.zombie?.fenced).toBe(true);
  });

  it('stops the relay rather than resend out of order when the store is restored, and recovers with a fresh retry', async () => {
    await runScenario([commit, step('forward'), serverSnapshot, commit, commit, step('forward'), step('forward'), serverRestore, commit, step('forward')]);
  });

  it(`delivers every committed emission exactly once, in order, through crashes, zombies, lost files and stores, and network faults (seed ${SEED})`, async () => {
    console.log(`outbox-model: seed ${SEED}, ${RUNS} runs of up to ${MAX_COMMANDS} commands (ONCEBOX_SEED=${SEED} to replay)`);
    const lengths: number[] = [];
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: MAX_COMMANDS, size: 'max' }), async (cmds) => {
        const list = [...cmds];
        lengths.push(list.length);
        await runScenario(list);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
    lengths.sort((a, b) => a - b);
    console.log(`outbox-model: commands per run: median ${lengths[Math.floor(lengths.length / 2)]}, max ${lengths.at(-1)}`);
  }, Math.max(300_000, RUNS * 10_000));
});
