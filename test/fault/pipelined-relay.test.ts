import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startFaultProxy, type Fault } from '../support/fault-proxy.js';
import { RUN, testOutbox } from '../support/outbox.js';
import { pgAvailable, pgSkipReason } from '../support/postgres.js';
import { startServer, type Backend } from '../support/server.js';

/** A small deterministic generator, so that a failing seed can be run again. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const FAULTS: Fault[] = ['forward', 'forward', 'delay', 'delay', 'drop-request', 'drop-response', 'duplicate', 'fail-503'];
const COMMITS = 60;

describe.each([
  ['sqlite', false],
  ['postgres', !pgAvailable],
] as [Backend, boolean][])('a relay with several requests in flight, through network faults: %s', (backend, skip) => {
  it.skipIf(skip).each([11, 29, 4242])(`delivers every emission once and in order, coalesces checkpoints, and none moves ahead of its events (seed %i)${skip ? pgSkipReason : ''}`, async (seed) => {
    const next = random(seed);
    const server = await startServer({ backend });
    // Random delays make the requests in flight overtake one another on their way to the server.
    const proxy = await startFaultProxy(server.url, { delayMs: () => Math.floor(next() * 40) });
    proxy.plan(...Array.from({ length: 200 }, () => FAULTS[Math.floor(next() * FAULTS.length)]!));
    const box = await testOutbox({ server: proxy.url, batchMaxRows: 2, maxInFlight: 4, retryMinDelayMs: 5, retryMaxDelayMs: 20 });
    const ready = box.asset('batch_ready');
    const progress = box.checkpoint('progress', z.object({ batch: z.number(), step: z.number() }));

    // While delivery runs, the server's copy of the checkpoint never names a batch whose event it lacks.
    const stateUrl = `${server.url}/v1/streams/orders-ingest/${RUN.runId}?task=${RUN.task}`;
    let watching = true;
    let checks = 0;
    const watcher = (async () => {
      while (watching) {
        const state = await fetch(stateUrl);
        if (state.status === 200) {
          const mirrored = ((await state.json()) as { checkpoints: { progress?: { batch: number } } }).checkpoints.progress?.batch ?? 0;
          const stored = new Set((await server.events()).map((event) => event.partitionKey));
          for (let batch = 1; batch <= mirrored; batch++) expect(stored.has(`batch-${batch}`), `checkpoint ${mirrored} before batch-${batch}`).toBe(true);
          checks++;
        } else {
          await state.arrayBuffer();
        }
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();

    const emissions = [];
    for (let batch = 1; batch <= COMMITS; batch++) {
      emissions.push(
        box.commit((tx) => {
          tx.set(progress, { batch, step: 0 });
          return tx.emit(ready, { partitionKey: `batch-${batch}` });
        }),
      );
      // Checkpoint-only commits, coalesced into the waiting update, perhaps while it is in flight.
      for (const step of [1, 2]) box.commit((tx) => tx.set(progress, { batch, step }));
      if (batch % 7 === 0) await new Promise((resolve) => setTimeout(resolve, 3));
    }
    const receipts = await Promise.all(emissions.map((emission) => emission.receipt()));
    // The last checkpoint update follows the last emission; closing waits for it.
    expect(await box.close({ timeoutMs: 15_000 })).toMatchObject({ pending: 0, dead: 0 });
    watching = false;
    await watcher;

    const events = await server.events();
    expect(events.map((event) => event.partitionKey)).toEqual(emissions.map((_, i) => `batch-${i + 1}`));
    expect(new Set(receipts.map((receipt) => receipt.eventId)).size).toBe(COMMITS);
    expect(events.map((event) => event.eventId)).toEqual(receipts.map((receipt) => receipt.eventId));
    const state = (await (await fetch(stateUrl)).json()) as { checkpoints: unknown };
    expect(state.checkpoints).toEqual({ progress: { batch: COMMITS, step: 2 } });
    expect(checks).toBeGreaterThan(0);
    // The window was used: more than one request of the stream was on its way at once.
    expect(proxy.stats.maxConcurrent).toBeGreaterThan(1);
  }, 120_000);
});

describe('a checkpoint update rewritten while in flight', () => {
  it('is sent again with its new revision, and the server ends at the newest value', async () => {
    const server = await startServer();
    const proxy = await startFaultProxy(server.url, { delayMs: 300 });
    const box = await testOutbox({ server: proxy.url, retryMinDelayMs: 5, retryMaxDelayMs: 20 });
    const progress = box.checkpoint('progress', z.object({ batch: z.number() }));
    const first = box.commit((tx) => {
      tx.set(progress, { batch: 0 });
      return tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-0' });
    });
    await first.receipt();
    expect(await box.relay!.drain(5000)).toBe(true);
    proxy.plan('delay');
    const seen = proxy.stats.requests;
    box.commit((tx) => tx.set(progress, { batch: 1 }));
    // The update is on its way, held 300 ms before the server sees it; the next commit rewrites it.
    while (proxy.stats.requests === seen) await new Promise((resolve) => setTimeout(resolve, 2));
    box.commit((tx) => tx.set(progress, { batch: 2 }));
    expect(box.file.db.prepare("SELECT count(*) FROM outbox WHERE kind = 'checkpoint' AND revision = 1").pluck().get()).toBe(1);
    expect(await box.close({ timeoutMs: 10_000 })).toMatchObject({ pending: 0, dead: 0 });
    const state = (await (await fetch(`${server.url}/v1/streams/orders-ingest/${RUN.runId}?task=${RUN.task}`)).json()) as { checkpoints: unknown };
    expect(state.checkpoints).toEqual({ progress: { batch: 2 } });
  });
});
