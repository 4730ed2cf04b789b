import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { openConsumer, type Consumer } from '../../src/consumer/index.js';
import { openOutbox, type Outbox } from '../../src/outbox/index.js';
import type { StoredEvent } from '../../src/protocol/wire.js';
import { startFaultProxy, type Fault, type FaultProxy } from '../support/fault-proxy.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const SEED = Number(process.env.ONCEBOX_SEED ?? Date.now() % 2 ** 31);
const RUNS = Number(process.env.ONCEBOX_RUNS ?? 25);
const MAX_COMMANDS = 20;
/** The chain: a producer of stage0, then consumers that turn stage k-1 into stage k. */
const STAGES = [1, 2] as const;
const asset = (stage: number) => `stage${stage}`;
/** A second emission per consumed event, of an asset no stage consumes: a commit then writes 3 rows. */
const audit = (stage: number) => `stage${stage}_audit`;
const quiet = { info() {}, warn() {}, error() {} };

/** What the model knows: how many source events were published. Everything else must follow from it. */
interface Model {
  published: number;
}

/** One consumer stage: its proxy to the server (for network faults), its file, and its running consumer. */
interface Stage {
  stage: number;
  proxy: FaultProxy;
  /** Files this stage has had; a fresh file (a lost machine) is a new one. */
  files: number;
  consumer: Consumer;
  stop: AbortController;
  running: Promise<unknown>;
}

interface System {
  dir: string;
  server: RunningServer;
  source: Outbox;
  stages: Stage[];
}

async function startStage(real: { dir: string }, stage: number, proxy: FaultProxy, files: number): Promise<Stage> {
  const consumer = await openConsumer({
    path: join(real.dir, `stage${stage}-${files}.db`),
    server: proxy.url,
    group: `stage${stage}`,
    assets: [asset(stage - 1)],
    logger: quiet,
    waitSeconds: 0.2,
    retryMaxDelayMs: 100,
    requestTimeoutMs: 2_000,
    // Each commit writes 3 rows (two emissions, the cursor) and a request takes 2: a request can then hold
    // an event's emissions without the cursor after them, and a restart on a fresh file processes that
    // event again. Only keys derived from the event keep its emissions once.
    relay: { batchMaxRows: 2 },
  });
  const stop = new AbortController();
  const running = consumer.run(
    (event, ctx) =>
      ctx.commit((tx) => {
        tx.emit(asset(stage), { partitionKey: event.partitionKey! });
        tx.emit(audit(stage), { partitionKey: event.partitionKey! });
      }),
    { signal: stop.signal },
  );
  return { stage, proxy, files, consumer, stop, running };
}

/** Stops a stage where it stands: no drain, its undelivered rows stay in its file (or are lost with it). */
async function halt(stage: Stage): Promise<void> {
  stage.stop.abort();
  await stage.running.catch(() => undefined);
  await stage.consumer.close({ timeoutMs: 0 });
}

type Command = fc.AsyncCommand<Model, System>;

const command = (name: string, run: (model: Model, real: System) => Promise<void>): Command => ({
  check: () => true,
  run,
  toString: () => name,
});

const publish = (count: number) =>
  command(`publish(${count})`, async (model, real) => {
    real.source.commit((tx) => {
      for (let i = 0; i < count; i++) tx.emit(real.source.asset(asset(0)), { partitionKey: `p-${model.published + i + 1}` });
    });
    model.published += count;
  });

/** A stage's process dies and comes back, on its own file or on a fresh one (its machine lost). */
const restart = (stage: number, fresh: boolean) =>
  command(`restart(stage${stage}${fresh ? ', fresh file' : ''})`, async (_model, real) => {
    const old = real.stages[stage - 1]!;
    await halt(old);
    real.stages[stage - 1] = await startStage(real, stage, old.proxy, fresh ? old.files + 1 : old.files);
  });

/** The next requests of a stage (reads, deliveries, claims) meet these network faults. */
const faults = (stage: number, planned: Fault[]) =>
  command(`faults(stage${stage}: ${planned.join(', ')})`, async (_model, real) => {
    real.stages[stage - 1]!.proxy.plan(...planned);
  });

const pause = command('pause', () => new Promise((resolve) => setTimeout(resolve, 30)));

const faultArb = fc.constantFrom<Fault>('drop-response', 'drop-request', 'duplicate', 'fail-503');
const commands = [
  fc.oneof(
    { arbitrary: fc.integer({ min: 1, max: 3 }).map(publish), weight: 4 },
    { arbitrary: fc.tuple(fc.constantFrom(...STAGES), fc.boolean()).map(([stage, fresh]) => restart(stage, fresh)), weight: 2 },
    { arbitrary: fc.tuple(fc.constantFrom(...STAGES), fc.array(faultArb, { minLength: 1, maxLength: 3 })).map(([stage, planned]) => faults(stage, planned)), weight: 2 },
    { arbitrary: fc.constant(pause), weight: 2 },
  ),
];

/** Each event of `upstream` has exactly one event of the next stage, caused by it, in the same order. */
function expectOneEachInOrder(upstream: StoredEvent[], downstream: StoredEvent[], stage: number): void {
  expect(downstream.map((e) => e.partitionKey), `stage${stage}: one event per upstream event, in its order`).toEqual(upstream.map((e) => e.partitionKey));
  expect(downstream.map((e) => e.causedBy), `stage${stage}: each caused by its upstream event`).toEqual(upstream.map((e) => e.eventId));
  expect(new Set(downstream.map((e) => e.depth)), `stage${stage}: depth`).toEqual(new Set(downstream.length ? [stage] : []));
}

async function runScenario(list: Command[]): Promise<void> {
  const dir = tempDir();
  const server = await startServer({ assets: [asset(0), asset(1), asset(2), audit(1), audit(2)] });
  const source = await openOutbox({ path: join(dir, 'source.db'), server: server.url, producer: 'source', run: { workflow: 'w', runId: 'r', attempt: 1 }, logger: quiet });
  const real: System = { dir, server, source, stages: [] };
  for (const stage of STAGES) real.stages.push(await startStage(real, stage, await startFaultProxy(server.url), 0));
  const model: Model = { published: 0 };
  try {
    for (const cmd of list) if (cmd.check(model)) await cmd.run(model, real);
    // The faults end; everything published must come through every stage.
    for (const stage of real.stages) stage.proxy.clearPlan();
    const deadline = Date.now() + 30_000;
    let last: StoredEvent[] = [];
    while (Date.now() < deadline) {
      last = await server.events({ asset: asset(2) });
      if (last.length >= model.published) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    // A moment more: a duplicate would show up now.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const [s0, s1, s2, a1, a2] = await Promise.all([asset(0), asset(1), asset(2), audit(1), audit(2)].map((name) => server.events({ asset: name })));
    expect(s0!.map((e) => e.partitionKey)).toEqual(Array.from({ length: model.published }, (_, i) => `p-${i + 1}`));
    expectOneEachInOrder(s0!, s1!, 1);
    expectOneEachInOrder(s0!, a1!, 1);
    expectOneEachInOrder(s1!, s2!, 2);
    expectOneEachInOrder(s1!, a2!, 2);
  } finally {
    for (const stage of real.stages) {
      await halt(stage);
      await stage.proxy.close();
    }
    await source.close({ timeoutMs: 0 });
    await server.close();
  }
}

describe('a three-stage pipeline (producer → consumer/producer → consumer/producer)', () => {
  it(`turns every source event into exactly one final event, in order at every stage, through restarts, fresh files, lost responses and duplicate deliveries (seed ${SEED})`, async () => {
    console.log(`pipeline-model: seed ${SEED}, ${RUNS} runs of up to ${MAX_COMMANDS} commands (ONCEBOX_SEED=${SEED} to replay)`);
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: MAX_COMMANDS, size: 'max' }), async (cmds) => {
        await runScenario([...cmds]);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  }, 300_000);
});
