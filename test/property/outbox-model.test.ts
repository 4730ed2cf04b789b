import fc from 'fast-check';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createServer, type OnceboxServer } from '../../src/dedupe/index.js';
import { FencedError, openOutbox, type Outbox } from '../../src/outbox/index.js';
import { Relay } from '../../src/outbox/relay.js';
import { HttpTransport } from '../../src/outbox/transport.js';
import type { StreamState } from '../../src/protocol/wire.js';
import { startFaultProxy, type Fault, type FaultProxy } from '../support/fault-proxy.js';
import { allEvents } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * Model-based test of the whole path. A job works through a backlog of batches; batch b emits the
 * partitions `b-0 … b-k` (k fixed by b, so a re-run emits the same identities). Commits, relay steps
 * and every fault are interleaved at random: dropped requests and responses, duplicated deliveries,
 * crashes of the producer and of the relay, server restarts, a lost outbox file (a retry on a fresh
 * machine) and a zombie attempt running beside its retry.
 *
 * Invariants, after every command:
 * - the server's events are a prefix of the backlog's partitions, in batch order: each at most once;
 * - their attempts never go down: no item of a zombie is accepted after its retry delivered;
 * - the server's checkpoint copy is never ahead of them: a mirror at batch m means every partition of
 *   batches 1..m is stored.
 * At the end, the latest attempt finishes the backlog as far as anyone committed it, and after a drain
 * the server holds exactly that prefix.
 */

const SEED = Number(process.env.ONCEBOX_SEED ?? Date.now() % 2 ** 31);
const RUNS = Number(process.env.ONCEBOX_RUNS ?? 50);
const LEASE_TTL_MS = 1000;
const RUN_ID = 'r';

const partitionsOf = (batch: number) => Array.from({ length: 1 + (batch % 3) }, (_, e) => `${batch}-${e}`);
const backlogUpTo = (batch: number) => Array.from({ length: batch }, (_, i) => partitionsOf(i + 1)).flat();

interface Producer {
  box: Outbox;
  relay: Relay;
  attempt: number;
  path: string;
  fenced: boolean;
}

interface Model {
  /** The furthest batch any attempt committed. */
  furthest: number;
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
  private files = 0;

  async start(): Promise<void> {
    await this.startServer();
    this.proxy = await startFaultProxy(this.url);
    this.current = await this.openProducer(join(this.dir, `outbox-${this.files++}.db`), 1);
  }

  async startServer(): Promise<void> {
    this.server = await createServer({ db: this.serverPath, assets: ['batch_ready'], durability: 'normal' });
    this.url = await this.server.listen();
    this.proxy?.setUpstream(this.url);
  }

  /** A job process: an outbox (resuming from the server when the file is fresh) and its own relay. */
  async openProducer(path: string, attempt: number): Promise<Producer> {
    const box = await openOutbox({
      path,
      server: this.proxy.url,
      relay: 'manual',
      producer: 'model',
      run: { workflow: 'w', runId: RUN_ID, attempt },
      durability: 'normal',
      now: () => this.clock,
    });
    return { box, relay: this.newRelay(box), attempt, path, fenced: false };
  }

  newRelay(box: Outbox): Relay {
    return new Relay(box.file, {
      transport: new HttpTransport({ servers: [this.proxy.url], requestTimeoutMs: 5000 }),
      batchMaxRows: 3,
      batchMaxBytes: 1 << 20,
      retryMinDelayMs: 0,
      retryMaxDelayMs: 0,
      leaseTtlMs: LEASE_TTL_MS,
      now: () => this.clock,
    });
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

  /** One delivery attempt through the proxy with `fault`; failures are the point, not errors. */
  async step(producer: Producer, fault: Fault): Promise<void> {
    this.proxy.plan(fault);
    await producer.relay.step().catch((error: { code?: string }) => {
      if (error instanceof FencedError) {
        producer.fenced = true;
        return;
      }
      if (!['network', 'timeout', 'sequence_gap'].includes(error.code ?? '')) throw error;
    });
    this.proxy.plan(); // nothing left over for the next step
  }

  /** A crash: the handle is dropped without draining or releasing the lease; the file is all that is left. */
  crash(producer: Producer): void {
    producer.box.file.close();
  }

  /** A retry of the latest attempt on another machine: a fresh file, resuming from the server. */
  async retryOnFreshMachine(): Promise<void> {
    this.current = await this.openProducer(join(this.dir, `outbox-${this.files++}.db`), this.current.attempt + 1);
  }

  async mirror(): Promise<number> {
    const response = await fetch(`${this.url}/v1/streams/model/${RUN_ID}`);
    if (response.status === 404) return 0;
    const state = (await response.json()) as StreamState;
    return (state.checkpoints.progress as { batch: number } | undefined)?.batch ?? 0;
  }

  async stop(): Promise<void> {
    this.crash(this.current);
    if (this.zombie) this.crash(this.zombie);
    await this.proxy.close();
    await this.server.close();
  }
}

type Command = fc.AsyncCommand<Model, System>;

const command = (name: string, run: (model: Model, real: System) => Promise<void> | void): Command => ({
  check: () => true,
  run: async (model, real) => run(model, real),
  toString: () => name,
});

const commit = command('commit', (model, real) => {
  const batch = real.commitNext(real.current);
  if (batch !== undefined) model.furthest = Math.max(model.furthest, batch);
});

const zombieCommit = command('zombieCommit', (model, real) => {
  if (!real.zombie || real.zombie.fenced) return;
  const batch = real.commitNext(real.zombie);
  if (batch !== undefined) model.furthest = Math.max(model.furthest, batch);
});

const step = (fault: Fault) => command(`step(${fault})`, (_model, real) => real.step(real.current, fault));

const zombieStep = command('zombieStep', async (_model, real) => {
  if (real.zombie && !real.zombie.fenced) await real.step(real.zombie, 'forward');
});

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

const serverRestart = command('serverRestart', async (_model, real) => {
  await real.server.close();
  await real.startServer();
});

const loseFile = command('loseFile', async (_model, real) => {
  real.crash(real.current);
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${real.current.path}${suffix}`, { force: true });
  await real.retryOnFreshMachine();
});

const startZombie = command('startZombie', async (_model, real) => {
  if (real.zombie) real.crash(real.zombie);
  real.zombie = real.current; // the old attempt lost its heartbeat, not its process
  await real.retryOnFreshMachine();
});

async function expectInvariants(real: System): Promise<string[]> {
  const events = await allEvents(real.url);
  const stored = events.map((event) => event.partitionKey!);
  expect(stored).toEqual(backlogUpTo(200).slice(0, stored.length));
  // Fencing: once an attempt has delivered, no earlier attempt gets another event in.
  const attempts = events.map((event) => event.attempt);
  expect(attempts).toEqual([...attempts].sort((a, b) => a - b));
  expect(stored.length).toBeGreaterThanOrEqual(backlogUpTo(await real.mirror()).length);
  return stored;
}

// Weighted so that runs get far enough into the backlog for faults and zombies to matter.
const commands = [
  fc.oneof(
    { arbitrary: fc.constant(commit), weight: 4 },
    { arbitrary: fc.constant(step('forward')), weight: 4 },
    { arbitrary: fc.constantFrom<Fault>('drop-request', 'drop-response', 'duplicate').map(step), weight: 2 },
    { arbitrary: fc.constant(zombieCommit), weight: 3 },
    { arbitrary: fc.constant(zombieStep), weight: 3 },
    { arbitrary: fc.constantFrom(crashRestartProducer, crashRestartRelay, serverRestart, loseFile, startZombie), weight: 2 },
  ),
];

describe('the outbox, relay and server as one model', () => {
  it('fences a zombie that would otherwise add events after its retry delivered', async () => {
    const real = new System();
    await real.start();
    const model: Model = { furthest: 0 };
    try {
      const scenario = [commit, step('forward'), startZombie, commit, step('forward'), zombieCommit, zombieStep, zombieCommit, zombieStep];
      for (const cmd of scenario) {
        await cmd.run(model, real);
        await expectInvariants(real);
      }
      expect(real.zombie?.fenced).toBe(true);
    } finally {
      await real.stop();
    }
  });

  it(`deliver every committed emission exactly once, in order, through crashes, lost files, zombies and network faults (seed ${SEED})`, async () => {
    console.log(`outbox-model: seed ${SEED}, ${RUNS} runs (ONCEBOX_SEED=${SEED} to replay)`);
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 60 }), async (cmds) => {
        const real = new System();
        await real.start();
        const model: Model = { furthest: 0 };
        try {
          const checked = [...cmds].map(
            (cmd): Command => ({
              check: (m) => cmd.check(m),
              run: async (m, r) => {
                await cmd.run(m, r);
                await expectInvariants(r);
              },
              toString: () => cmd.toString(),
            }),
          );
          await fc.asyncModelRun(() => ({ model, real }), checked);
          // The latest attempt finishes the backlog as far as anyone got, then everything drains.
          while ((real.current.box.checkpoint('progress', progressSchema).get()?.batch ?? 0) < model.furthest) {
            expect(real.commitNext(real.current)).toBeDefined();
          }
          for (let i = 0; i < 500 && real.current.box.status().pending + real.current.box.status().pendingCheckpoints > 0; i++) {
            await real.step(real.current, 'forward');
          }
          const stored = await expectInvariants(real);
          expect(stored).toEqual(backlogUpTo(model.furthest));
        } finally {
          await real.stop();
        }
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  }, 300_000);
});
