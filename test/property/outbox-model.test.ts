import fc from 'fast-check';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createServer, type OnceboxServer } from '../../src/dedupe/index.js';
import { openOutbox, type Outbox } from '../../src/outbox/index.js';
import { Relay } from '../../src/outbox/relay.js';
import { HttpTransport } from '../../src/outbox/transport.js';
import { startFaultProxy, type Fault, type FaultProxy } from '../support/fault-proxy.js';
import { allEvents } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * Model-based test of the whole path: commits, relay steps and every fault interleaved at random.
 * The model is the list of committed partition keys; the invariant is that the server's events are
 * always a prefix of it (commit order, each once) and, once drained, all of it.
 */

const SEED = Number(process.env.ONCEBOX_SEED ?? Date.now() % 2 ** 31);
const RUNS = Number(process.env.ONCEBOX_RUNS ?? 60);
const LEASE_TTL_MS = 1000;

interface Model {
  committed: string[];
  commits: number;
}

class System {
  box!: Outbox;
  relay!: Relay;
  server!: OnceboxServer;
  proxy!: FaultProxy;
  clock = 1_000_000;
  readonly dir = tempDir();
  readonly outboxPath = join(this.dir, 'outbox.db');
  readonly serverPath = join(this.dir, 'server.db');
  readonly progress = z.object({ commit: z.number().int() });

  async start(): Promise<void> {
    await this.startServer();
    this.proxy = await startFaultProxy(this.url);
    await this.openProducer();
  }

  url = '';

  async startServer(): Promise<void> {
    this.server = await createServer({ db: this.serverPath, assets: ['batch_ready'], durability: 'normal' });
    this.url = await this.server.listen();
    this.proxy?.setUpstream(this.url);
  }

  async openProducer(): Promise<void> {
    this.box = await openOutbox({
      path: this.outboxPath,
      server: 'http://127.0.0.1:9',
      relay: 'manual',
      producer: 'model',
      run: { workflow: 'w', runId: 'r', attempt: 1 },
      durability: 'normal',
      now: () => this.clock,
    });
    this.newRelay();
  }

  /** A relay of its own, as a fresh process would have, talking through the fault proxy. */
  newRelay(): void {
    this.relay = new Relay(this.box.file, {
      transport: new HttpTransport({ server: this.proxy.url, requestTimeoutMs: 5000 }),
      batchMaxRows: 3,
      batchMaxBytes: 1 << 20,
      retryMinDelayMs: 0,
      retryMaxDelayMs: 0,
      leaseTtlMs: LEASE_TTL_MS,
      now: () => this.clock,
    });
  }

  /** One delivery attempt through the proxy with `fault`; failures are the point, not errors. */
  async step(fault: Fault): Promise<void> {
    this.proxy.plan(fault);
    await this.relay.step().catch((error: { code?: string }) => {
      if (!['network', 'timeout', 'sequence_gap', 'http_503', 'unavailable'].includes(error.code ?? '')) throw error;
    });
    this.proxy.plan(); // nothing left over for the next step
  }

  /** A crash: the handle is dropped without draining or releasing the lease; the file is all that is left. */
  crashProducer(): void {
    this.box.file.close();
  }

  checkpoint(): number | undefined {
    return this.box.checkpoint('progress', this.progress).get()?.commit;
  }

  async stop(): Promise<void> {
    this.crashProducer();
    await this.proxy.close();
    await this.server.close();
  }
}

type Command = fc.AsyncCommand<Model, System>;

class CommitCommand implements Command {
  constructor(readonly count: number) {}
  check = () => true;
  async run(model: Model, real: System): Promise<void> {
    const commit = model.commits + 1;
    const keys = Array.from({ length: this.count }, (_, i) => `c${commit}-e${i}`);
    const asset = real.box.asset('batch_ready');
    real.box.commit((tx) => {
      tx.set(real.box.checkpoint('progress', real.progress), { commit });
      for (const key of keys) tx.emit(asset, { partitionKey: key });
    });
    model.commits = commit;
    model.committed.push(...keys);
  }
  toString = () => `commit(${this.count})`;
}

class StepCommand implements Command {
  constructor(readonly fault: Fault) {}
  check = () => true;
  async run(_model: Model, real: System): Promise<void> {
    await real.step(this.fault);
  }
  toString = () => `step(${this.fault})`;
}

class CrashRestartProducerCommand implements Command {
  check = () => true;
  async run(model: Model, real: System): Promise<void> {
    real.crashProducer();
    real.clock += LEASE_TTL_MS + 1; // the dead process's lease runs out
    await real.openProducer();
    // The checkpoint and the emissions it accounts for survived together.
    expect(real.checkpoint() ?? 0).toBe(model.commits);
    expect(real.box.status().pending + real.box.status().delivered).toBe(model.committed.length);
  }
  toString = () => 'crashRestartProducer';
}

class CrashRestartRelayCommand implements Command {
  check = () => true;
  async run(_model: Model, real: System): Promise<void> {
    real.clock += LEASE_TTL_MS + 1;
    real.newRelay();
  }
  toString = () => 'crashRestartRelay';
}

class ServerRestartCommand implements Command {
  check = () => true;
  async run(_model: Model, real: System): Promise<void> {
    await real.server.close();
    await real.startServer();
  }
  toString = () => 'serverRestart';
}

/** The server's events for the producer, checked against the model after every command. */
async function expectPrefixOfCommitted(model: Model, real: System): Promise<string[]> {
  const stored = (await allEvents(real.url)).map((event) => event.partitionKey!);
  expect(stored).toEqual(model.committed.slice(0, stored.length));
  return stored;
}

const commands = [
  fc.integer({ min: 1, max: 3 }).map((count) => new CommitCommand(count)),
  fc.constantFrom<Fault>('forward', 'drop-request', 'drop-response', 'duplicate').map((fault) => new StepCommand(fault)),
  fc.constant(new StepCommand('forward')),
  fc.constant(new CrashRestartProducerCommand()),
  fc.constant(new CrashRestartRelayCommand()),
  fc.constant(new ServerRestartCommand()),
];

describe('the outbox, relay and server as one model', () => {
  it(`deliver every committed emission exactly once, in commit order, through any interleaving of faults (seed ${SEED})`, async () => {
    console.log(`outbox-model: seed ${SEED}, ${RUNS} runs (ONCEBOX_SEED=${SEED} to replay)`);
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 40 }), async (cmds) => {
        const real = new System();
        await real.start();
        const model: Model = { committed: [], commits: 0 };
        try {
          await fc.asyncModelRun(() => ({ model, real }), wrapWithInvariant(cmds));
          // Drain with no faults: everything committed must arrive, once, in order.
          for (let i = 0; i < 100 && real.box.status().pending > 0; i++) await real.step('forward');
          const stored = await expectPrefixOfCommitted(model, real);
          expect(stored).toEqual(model.committed);
        } finally {
          await real.stop();
        }
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  }, 240_000);
});

/** Runs the prefix invariant after each command, so a failure points at the command that broke it. */
function wrapWithInvariant(cmds: Iterable<Command>): Iterable<Command> {
  return [...cmds].map((command) => ({
    check: (model: Readonly<Model>) => command.check(model),
    run: async (model: Model, real: System) => {
      await command.run(model, real);
      await expectPrefixOfCommitted(model, real);
    },
    toString: () => command.toString(),
  }));
}
