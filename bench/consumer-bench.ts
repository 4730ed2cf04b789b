import { join } from 'node:path';
import { setImmediate as yieldToRelay } from 'node:timers/promises';
import { openConsumer } from '../src/consumer/index.js';
import { openOutbox } from '../src/outbox/index.js';
import { benchDir, percentile, startServerProcess } from './support.js';

const PER_COMMIT = 100;

/**
 * Events per second a consumer processes with one transaction per batch (of up to 1000): each event adds
 * to a count in the consumer's own table, and each batch commits its cursor and processed marks with
 * those writes, durably (FULL). The events are published first, by `oncebox server` in its own process,
 * so the clock measures the consumer alone: reading pages, committing, and mirroring its cursor.
 */
export async function consumerThroughput(events: number): Promise<number> {
  const dir = benchDir();
  const server = await startServerProcess(dir);
  try {
    const box = await openOutbox({ path: join(dir, 'producer.db'), server: server.url, producer: 'bench', run: { workflow: 'w', runId: 'r', attempt: 1 } });
    const asset = box.asset('batch_ready');
    for (let c = 0; c < events / PER_COMMIT; c++) {
      box.commit((tx) => {
        for (let e = 0; e < PER_COMMIT; e++) tx.emit(asset, { partitionKey: `p-${c}-${e}`, extra: { rows: e } });
      });
      await yieldToRelay();
    }
    await box.close({ timeoutMs: 120_000 });
    const consumer = await openConsumer({ path: join(dir, 'consumer.db'), server: server.url, group: 'bench', assets: ['batch_ready'], batchSize: 1000 });
    consumer.db.exec('CREATE TABLE counts (partition_key TEXT PRIMARY KEY, rows INTEGER NOT NULL)');
    const count = consumer.db.prepare('INSERT INTO counts VALUES (?, ?)');
    const stop = new AbortController();
    const started = performance.now();
    let seen = 0;
    await consumer.run(
      (batch, ctx) => {
        ctx.commit(() => {
          for (const event of batch) count.run(event.partitionKey, (event.extra as { rows: number }).rows);
        });
        seen += batch.length;
        if (seen >= events) stop.abort();
      },
      { batch: true, signal: stop.signal },
    );
    const seconds = (performance.now() - started) / 1000;
    const { pending } = await consumer.close({ timeoutMs: 30_000 });
    if (pending !== 0) throw new Error(`consumer: ${pending} cursor updates left pending`);
    return events / seconds;
  } finally {
    await server.stop();
  }
}

/**
 * Commit to handler at low load, through long-poll: a producer commits one emission at a time, and the
 * clock stops when the consumer's handler gets it. Both in this process, the server in its own.
 */
export async function consumeLatency(samples: number): Promise<{ p50: number; p99: number }> {
  const dir = benchDir();
  const server = await startServerProcess(dir);
  try {
    const box = await openOutbox({ path: join(dir, 'producer.db'), server: server.url, producer: 'bench', run: { workflow: 'w', runId: 'r', attempt: 1 } });
    const consumer = await openConsumer({ path: join(dir, 'consumer.db'), server: server.url, group: 'latency', assets: ['batch_ready'] });
    const committedAt = new Map<string, number>();
    const times: number[] = [];
    const stop = new AbortController();
    let handled: (() => void) | undefined;
    const running = consumer.run(
      (event) => {
        const at = committedAt.get(event.partitionKey!);
        if (at !== undefined) times.push(performance.now() - at);
        handled?.();
      },
      { signal: stop.signal },
    );
    for (let i = 0; i < samples + 20; i++) {
      const got = new Promise<void>((resolve) => (handled = resolve));
      const key = `l-${i}`;
      box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: key }));
      // The first ones warm up the connections and the JIT.
      if (i >= 20) committedAt.set(key, performance.now());
      await got;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    stop.abort();
    await running;
    await consumer.close();
    await box.close();
    return { p50: percentile(times, 50), p99: percentile(times, 99) };
  } finally {
    await server.stop();
  }
}
