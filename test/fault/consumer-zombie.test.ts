import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openConsumer, type Consumer } from '../../src/consumer/index.js';
import { FencedError } from '../../src/protocol/errors.js';
import { openOutbox } from '../../src/outbox/index.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet = { info() {}, warn() {}, error() {} };

async function publish(server: RunningServer, path: string, partitions: string[]): Promise<void> {
  const box = await openOutbox({ path, server: server.url, producer: 'orders', run: { workflow: 'wf', runId: path, attempt: 1 }, logger: quiet });
  box.commit((tx) => partitions.forEach((partitionKey) => tx.emit(box.asset('orders_ready'), { partitionKey })));
  await box.close();
}

function open(server: RunningServer, path: string, group = 'g'): Promise<Consumer> {
  return openConsumer({ path, server: server.url, group, assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2 });
}

/** The summariser's handler: one count in the file and one summary per event, in one commit. */
function summarise(consumer: Consumer, signal: AbortSignal): Promise<unknown> {
  consumer.db.exec('CREATE TABLE IF NOT EXISTS counts (partition_key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
  return consumer.run(
    (event, ctx) =>
      ctx.commit((tx) => {
        tx.db.prepare('INSERT INTO counts VALUES (?, 1) ON CONFLICT DO UPDATE SET n = n + 1').run(event.partitionKey);
        tx.emit('orders_summarised', { partitionKey: event.partitionKey! });
      }),
    { signal },
  );
}

async function until(condition: () => boolean | Promise<boolean>, timeoutMs = 20_000, what = ''): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`timed out waiting ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('a zombie consumer', () => {
  it.each([
    ['on another machine (its own file)', false],
    ['on the same file', true],
  ])('%s keeps running beside its replacement: every effect happens once, and the old one stops with FencedError', { timeout: 180_000 }, async (_name, sameFile) => {
    const server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publish(server, join(dir, 'p1.db'), ['d1', 'd2', 'd3']);
    const old = await open(server, join(dir, 'old.db'));
    const stopOld = new AbortController();
    const oldRun = summarise(old, stopOld.signal).catch((error: unknown) => error);
    await until(() => old.cursor >= 3, 20_000, 'old');
    const replacement = await open(server, join(dir, sameFile ? 'old.db' : 'new.db'));
    expect(replacement.epoch).toBeGreaterThan(old.epoch);
    const stopNew = new AbortController();
    const newRun = summarise(replacement, stopNew.signal);
    // Both are running when these arrive; only the replacement may apply them.
    await publish(server, join(dir, 'p2.db'), ['d4', 'd5', 'd6']);
    await until(() => replacement.cursor >= 6, 20_000, 'replacement');
    const stopped = await Promise.race([oldRun, new Promise((resolve) => setTimeout(() => resolve('still running'), 5_000))]);
    expect(stopped).toBeInstanceOf(FencedError);
    stopNew.abort();
    await newRun;
    await until(async () => (await server.events({ asset: 'orders_summarised' })).length >= 6, 20_000, 'summaries');
    await old.close({ timeoutMs: 0 });
    await replacement.close();
    const summaries = await server.events({ asset: 'orders_summarised' });
    expect(summaries.map((e) => e.partitionKey)).toEqual(['d1', 'd2', 'd3', 'd4', 'd5', 'd6']);
    if (sameFile) {
      const check = await open(server, join(dir, 'old.db'), 'g');
      const counts = check.db.prepare('SELECT partition_key, n FROM counts ORDER BY partition_key').all();
      await check.close({ timeoutMs: 0 });
      expect(counts).toEqual(['d1', 'd2', 'd3', 'd4', 'd5', 'd6'].map((p) => ({ partition_key: p, n: 1 })));
    }
  });

  it('two consumers that start at the same instant, 40 times: exactly one holds the epoch each time', { timeout: 240_000 }, async () => {
    const server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publish(server, join(dir, 'p.db'), ['d1']);
    const holders: number[] = [];
    for (let round = 0; round < 40; round++) {
      const group = `race-${round}`;
      const pair = await Promise.all([open(server, join(dir, `${group}-a.db`), group), open(server, join(dir, `${group}-b.db`), group)]);
      expect(pair[0].epoch).not.toBe(pair[1].epoch);
      const stop = new AbortController();
      const outcomes = pair.map((consumer) => summarise(consumer, stop.signal).then(() => 'holds', (error: unknown) => (error instanceof FencedError ? 'fenced' : error)));
      // Each consumes d1 and delivers its summary and cursor; the lower epoch is told it is fenced.
      const first = await Promise.race(outcomes);
      expect(first).toBe('fenced');
      stop.abort();
      const settled = await Promise.all(outcomes);
      holders.push(settled.filter((outcome) => outcome === 'holds').length);
      expect(settled[pair[0].epoch > pair[1].epoch ? 0 : 1]).toBe('holds');
      await Promise.all(pair.map((consumer) => consumer.close({ timeoutMs: 0 })));
    }
    expect(holders).toEqual(Array.from({ length: 40 }, () => 1));
  });
});

describe('an idle zombie consumer on another machine', () => {
  it('stops with FencedError after its replacement’s claim, though no event comes: it asks at the end of a long-poll', { timeout: 180_000 }, async () => {
    const server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publish(server, join(dir, 'p1.db'), ['d1']);
    const waitSeconds = 1;
    const old = await openConsumer({ path: join(dir, 'old.db'), server: server.url, group: 'g', assets: ['orders_ready'], logger: quiet, waitSeconds });
    const oldRun = summarise(old, new AbortController().signal).catch((error: unknown) => error);
    await until(() => old.cursor >= 1, 20_000, 'old');
    // Its summary and cursor delivered too: a delivery still in flight at the claim would be fenced and tell
    // it, and the test would pass without the idle check it is about.
    await until(() => old.status().pending === 0, 20_000, 'old delivered');
    // Idle from here: no event will come to tell it, by a fence on delivery, that it was replaced.
    const replacement = await openConsumer({ path: join(dir, 'new.db'), server: server.url, group: 'g', assets: ['orders_ready'], logger: quiet, waitSeconds });
    // It learns of the claim at its next long-poll's end (a second); the minute only ends a wait that
    // would never end (an idle zombie that never asks runs on for ever), on however busy a machine.
    const ended = await Promise.race([oldRun, new Promise((resolve) => setTimeout(() => resolve('still running after a minute'), 60_000))]);
    expect(ended).toBeInstanceOf(FencedError);
    expect(ended).toMatchObject({ attempt: old.epoch, fencedBy: replacement.epoch });
    expect((ended as Error).message).toContain('has claimed this run at the server or delivered to it');
    await replacement.close();
    await old.close({ timeoutMs: 0 });
    await oldRun;
  });
});
