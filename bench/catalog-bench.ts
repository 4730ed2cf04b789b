import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { writeFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { join } from 'node:path';
import { benchDir, httpCall, median, percentile, spawnServer, dropSchema, type ServerProcess } from './support.js';

const PG_URL = process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const ASSETS = ['busy', 'a', 'b', 'c'];

/**
 * Publish latency with catalog readers looping over its costliest list: `readers` readers ask for every
 * consumer group (`GET /v1/catalog/consumers?limit=1000`, each group's lag counted) one after another,
 * without pause, while one producer publishes single-item batches, one at a time. A store of `events`
 * events and `groups` consumer groups behind them, one of whose asset lists names an asset 1,000 times.
 * The figures are the publish p50 and p99 with the readers over those without them, measured in the same
 * run on the same server, rounds alternating.
 */
export async function catalogReadersBench(
  store: 'sqlite' | 'postgres',
  options: { readers: number; events: number; groups: number; publishes: number; rounds: number },
): Promise<{ aloneP50: number; aloneP99: number; readP50: number; readP99: number; readsPerS: number }> {
  const dir = benchDir();
  const assets = join(dir, 'assets.txt');
  writeFileSync(assets, `${ASSETS.join('\n')}\n`);
  const schema = `oncebox_bench_catalog_${process.pid}`;
  const args = ['src/cli/main.ts', 'server', '--port', '0', '--assets', assets, '--rate-limit', 'off'];
  args.push('--db', store === 'postgres' ? PG_URL : join(dir, 'server.db'));
  if (store === 'postgres') args.push('--schema', schema);
  const server = await spawnServer(args);
  const publisher = new Agent({ keepAlive: true, maxSockets: 1 });
  const readerAgent = new Agent({ keepAlive: true, maxSockets: options.readers + 4 });
  try {
    await seed(server, options.events, options.groups);
    // The catalog's counts caught up with the seeded events once, as a server that has been running has them.
    await fetch(`${server.url}/v1/catalog/consumers?limit=1`);
    const stream = { producer: 'bench', workflow: 'w', runId: `r-${randomUUID()}`, task: null, attempt: 1 };
    let seq = 0;
    const publishTimes = async () => {
      const times: number[] = [];
      for (let i = 0; i < options.publishes; i++) {
        seq++;
        const body = JSON.stringify({ stream, items: [{ seq, key: randomUUID(), kind: 'event', asset: 'busy', partitionKey: `p-${seq}` }] });
        const started = performance.now();
        const status = await httpCall(publisher, server.url, 'POST', '/v1/emissions', body);
        if (status !== 200) throw new Error(`publish answered ${status}`);
        times.push(performance.now() - started);
      }
      return times;
    };
    // Warm up the server and the connection.
    await publishTimes();
    const alone = { p50: [] as number[], p99: [] as number[] };
    const read = { p50: [] as number[], p99: [] as number[] };
    let reads = 0;
    let readingMs = 0;
    for (let round = 0; round < options.rounds; round++) {
      const quiet = await publishTimes();
      alone.p50.push(median(quiet));
      alone.p99.push(percentile(quiet, 99));
      const looping = loopReaders(server, readerAgent, options.readers);
      // Measured once the readers are at it: a few pages read.
      while (looping.reads() < 5) await new Promise((resolve) => setTimeout(resolve, 20));
      const started = performance.now();
      try {
        const busy = await publishTimes();
        read.p50.push(median(busy));
        read.p99.push(percentile(busy, 99));
      } finally {
        readingMs += performance.now() - started;
        reads += await looping.stop();
      }
    }
    return { aloneP50: median(alone.p50), aloneP99: median(alone.p99), readP50: median(read.p50), readP99: median(read.p99), readsPerS: (reads / readingMs) * 1000 };
  } finally {
    publisher.destroy();
    readerAgent.destroy();
    await server.stop();
    if (store === 'postgres') await dropSchema(PG_URL, schema);
  }
}

/** The store the readers read: events in requests of 1000, and consumer groups with their asset lists and cursors. */
async function seed(server: ServerProcess, events: number, groups: number): Promise<void> {
  const post = async (stream: object, items: unknown[]) => {
    const response = await fetch(`${server.url}/v1/emissions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ stream, items }) });
    if (!response.ok) throw new Error(`seeding answered ${response.status}: ${await response.text()}`);
  };
  for (let start = 0; start < events; start += 1000) {
    const items = Array.from({ length: Math.min(1000, events - start) }, (_, i) => ({
      seq: i + 1,
      key: randomUUID(),
      kind: 'event',
      asset: ASSETS[1 + ((start + i) % 3)],
      partitionKey: `p-${start + i}`,
    }));
    await post({ producer: 'seed', workflow: 'w', runId: `run-${start}`, task: null, attempt: 1 }, items);
  }
  for (let g = 0; g < groups; g++) {
    const names = g === 0 ? Array.from({ length: 1000 }, () => 'a') : [ASSETS[1 + (g % 3)], ASSETS[1 + ((g + 1) % 3)]];
    const checkpoint = (seq: number, name: string, value: unknown) => ({ seq, key: randomUUID(), kind: 'checkpoint', name, value });
    await post({ producer: `group-${g}`, workflow: 'oncebox.consumer', runId: `group-${g}`, task: null, attempt: 1 }, [
      checkpoint(1, 'oncebox.assets', names),
      checkpoint(2, 'oncebox.cursor', Math.floor((g * events) / groups)),
    ]);
  }
}

/** `count` readers asking for every consumer group, page after page, without pause, until stopped. */
function loopReaders(server: ServerProcess, agent: Agent, count: number): { reads(): number; stop(): Promise<number> } {
  const stop = new AbortController();
  setMaxListeners(count + 16, stop.signal);
  let reads = 0;
  const reader = async () => {
    while (!stop.signal.aborted) {
      try {
        await httpCall(agent, server.url, 'GET', '/v1/catalog/consumers?limit=1000', undefined, stop.signal);
        reads++;
      } catch {
        // Stopped.
      }
    }
  };
  const done = Promise.all(Array.from({ length: count }, reader));
  return {
    reads: () => reads,
    stop: async () => {
      stop.abort();
      await done;
      return reads;
    },
  };
}
