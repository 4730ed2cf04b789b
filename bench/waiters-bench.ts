import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setMaxListeners } from 'node:events';
import { Agent } from 'node:http';
import { benchDir, httpCall, median, spawnServer, dropSchema, type ServerProcess } from './support.js';

const PG_URL = process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';

/**
 * Publish latency with idle long-polls held open: `waiters` readers wait (`?wait=30`) on an asset that
 * gets no events, while one producer publishes single-item batches to another asset, one at a time.
 * Idle readers must cost a publish nothing: the figure is the publish p50 with them over the p50 without
 * them, measured in the same run on the same server, rounds alternating.
 */
export async function waitersBench(store: 'sqlite' | 'postgres', waiters: number, publishes: number, rounds: number): Promise<{ idleP50: number; waitingP50: number }> {
  const dir = benchDir();
  const assets = join(dir, 'assets.txt');
  writeFileSync(assets, 'busy\nquiet\n');
  const schema = `oncebox_bench_waiters_${process.pid}`;
  const args = ['src/cli/main.ts', 'server', '--port', '0', '--assets', assets, '--max-connections', String(waiters * 2 + 64), '--max-waiters', String(waiters + 16)];
  args.push('--db', store === 'postgres' ? PG_URL : join(dir, 'server.db'));
  if (store === 'postgres') args.push('--schema', schema);
  const server = await spawnServer(args);
  const readers = new Agent({ keepAlive: true, maxSockets: waiters + 16 });
  const publisher = new Agent({ keepAlive: true, maxSockets: 1 });
  let seq = 0;
  const stream = { producer: 'bench', workflow: 'w', runId: `r-${randomUUID()}`, task: null, attempt: 1 };
  const publishOnce = async () => {
    seq++;
    const body = JSON.stringify({ stream, items: [{ seq, key: randomUUID(), kind: 'event', asset: 'busy', partitionKey: `p-${seq}` }] });
    const started = performance.now();
    const status = await httpCall(publisher, server.url, 'POST', '/v1/emissions', body);
    if (status !== 200) throw new Error(`publish answered ${status}`);
    return performance.now() - started;
  };
  const p50 = async () => {
    const times: number[] = [];
    for (let i = 0; i < publishes; i++) times.push(await publishOnce());
    return median(times);
  };
  try {
    // Warm up the server and the connection.
    await p50();
    const idle: number[] = [];
    const waiting: number[] = [];
    for (let round = 0; round < rounds; round++) {
      idle.push(await p50());
      const held = await holdWaiters(server, readers, waiters);
      try {
        waiting.push(await p50());
      } finally {
        held.release();
        await held.done;
      }
    }
    return { idleP50: median(idle), waitingP50: median(waiting) };
  } finally {
    readers.destroy();
    publisher.destroy();
    await server.stop();
    if (store === 'postgres') await dropSchema(PG_URL, schema);
  }
}

/** `count` readers waiting on the quiet asset, each asking again when its wait ends, until released. */
async function holdWaiters(server: ServerProcess, dispatcher: Agent, count: number) {
  const stop = new AbortController();
  // One signal for every reader's request: as many listeners as readers.
  setMaxListeners(count + 16, stop.signal);
  let waitingNow = 0;
  const reader = async () => {
    while (!stop.signal.aborted) {
      try {
        waitingNow++;
        await httpCall(dispatcher, server.url, 'GET', '/v1/events?asset=quiet&after=0&wait=30', undefined, stop.signal);
      } catch {
        // Released.
      } finally {
        waitingNow--;
      }
    }
  };
  const done = Promise.all(Array.from({ length: count }, reader));
  // Until the server holds them all: its gauge counts the readers waiting there.
  for (let tries = 0; tries < 300; tries++) {
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const held = Number(/^oncebox_event_readers_waiting (\d+)/m.exec(metrics)?.[1] ?? 0);
    if (held >= count) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { release: () => stop.abort(), done, waitingNow: () => waitingNow };
}
