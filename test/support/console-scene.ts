import { join } from 'node:path';
import { openConsumer } from '../../src/consumer/index.js';
import type { OnceboxServer } from '../../src/dedupe/index.js';
import { FencedError, openOutbox, RejectedError, type Outbox } from '../../src/outbox/index.js';

/**
 * What the console is tested and photographed against: a real server with what it exists to show,
 * made by the real producer and consumer libraries. A run retried on a fresh machine that started over
 * (its first batches absorbed as duplicates), the first machine's attempt going on as a zombie and
 * fenced, the run's success, a second run publishing a partition again, a run failed with a retry to
 * come, a refusal (an unregistered asset), and a consumer group two events in and lagging.
 */
export interface ConsoleScene {
  /** A read token with reads events and streams: what the console asks for. */
  consoleToken: string;
  adminToken: string;
  run: { producer: string; runId: string; task: string };
  group: string;
}

const BATCHES = 4;
/** The scene's jobs fail on purpose (a zombie, a refusal): their logs would only be noise. */
const QUIET = { info: () => undefined, warn: () => undefined, error: () => undefined };

export async function buildConsoleScene(server: OnceboxServer, url: string, dir: string): Promise<ConsoleScene> {
  const { store } = server;
  const adminToken = (await store.tokens.create({ scope: 'admin', note: 'jobs in the console scene' })).token;
  const consoleToken = (await store.tokens.create({ scope: 'read', reads: ['events', 'streams'], note: 'console' })).token;
  await store.registerAsset('batch_ready');
  const run = { workflow: 'orders', runId: '2026-11-30', task: 'ingest' };
  const open = (file: string, attempt: number, more: { runId?: string; resume?: 'never' } = {}) =>
    openOutbox({
      path: join(dir, file),
      server: url,
      token: adminToken,
      producer: 'orders-ingest',
      run: { ...run, runId: more.runId ?? run.runId, attempt },
      ...(more.resume ? { resume: more.resume } : {}),
      logger: QUIET,
    });
  const publish = async (box: Outbox, batches: number[]) => {
    const emissions = batches.map((batch) => box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: `2026-11-${20 + batch}`, extra: { batch } })));
    await Promise.all(emissions.map((emission) => emission.receipt()));
  };

  // Attempt 1 on machine A delivers three batches, then its machine drops out of sight.
  const machineA = await open('machine-a.db', 1);
  await publish(machineA, [1, 2, 3]);
  // The runner retries on machine B, which starts the run over: batches 1 to 3 are absorbed as duplicates.
  const machineB = await open('machine-b.db', 2, { resume: 'never' });
  await publish(machineB, [1, 2, 3, 4].slice(0, BATCHES));
  // Machine A comes back, a zombie: its next batch is fenced, never stored.
  const zombie = machineA.commit((tx) => tx.emit(machineA.asset('batch_ready'), { partitionKey: '2026-11-29', extra: { batch: 0 } }));
  await zombie.receipt().then(
    () => {
      throw new Error('the zombie was not fenced');
    },
    (error: unknown) => {
      if (!(error instanceof FencedError)) throw error;
    },
  );
  await machineA.close({ timeoutMs: 0 });
  await machineB.complete().event?.receipt();
  await machineB.close();

  // A consumer group that takes the first run's events and stops: it lags behind what comes next.
  const consumer = await openConsumer({
    path: join(dir, 'summariser.db'),
    server: url,
    group: 'summariser',
    assets: ['batch_ready'],
    token: adminToken,
    waitSeconds: 0.2,
    logger: QUIET,
  });
  const stop = new AbortController();
  let seen = 0;
  await consumer.run(
    () => {
      if (++seen === 2) stop.abort();
    },
    { signal: stop.signal },
  );
  await consumer.close();
  // The next day's run publishes 2026-11-21 again, under its own keys; then tries an asset nobody registered.
  const nextDay = await open('next-day.db', 1, { runId: '2026-12-01' });
  await publish(nextDay, [1]);
  const refused = nextDay.commit((tx) => tx.emit(nextDay.asset('orders_archived'), { partitionKey: '2026-12-01' }));
  await refused.receipt().catch((error: unknown) => {
    if (!(error instanceof RejectedError)) throw error;
  });
  nextDay.fail(new Error('upstream export missing'), undefined, { willRetry: true });
  await nextDay.close();

  return { consoleToken, adminToken, run: { producer: 'orders-ingest', runId: run.runId, task: run.task }, group: 'summariser' };
}

/** An asset with `count` partitions, one event each, published in requests of 500. */
export async function publishPartitions(url: string, token: string, asset: string, count: number): Promise<void> {
  const stream = { producer: 'backfill', workflow: 'backfill', runId: asset, task: null, attempt: 1 };
  for (let start = 0; start < count; start += 500) {
    const items = Array.from({ length: Math.min(500, count - start) }, (_, i) => {
      const n = start + i;
      return { seq: n + 1, key: keyOf(asset, n), kind: 'event', asset, partitionKey: `p-${String(n).padStart(5, '0')}` };
    });
    const response = await fetch(`${url}/v1/emissions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ stream, items }),
    });
    if (!response.ok) throw new Error(`publishing partitions: ${response.status} ${await response.text()}`);
  }
}

/** A fixed UUID per asset and partition number, so the scene is the same every time. */
function keyOf(asset: string, n: number): string {
  const hex = [...asset].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7).toString(16).padStart(8, '0');
  return `${hex}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
}
