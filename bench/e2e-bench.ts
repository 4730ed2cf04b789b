import Database from 'better-sqlite3';
import http from 'node:http';
import { join } from 'node:path';
import { setImmediate as yieldToRelay } from 'node:timers/promises';
import { v7 as uuidv7 } from 'uuid';
import { openOutbox, type Outbox } from '../src/outbox/index.js';
import { deriveKey } from '../src/outbox/commit/keys.js';
import { rawOutbox } from './raw-outbox.js';
import { benchDir, percentile, spawnServer, startServerProcess } from './support.js';

const PER_COMMIT = 100;

/**
 * Delivered events per second, commit to recorded receipt: the job commits `events` emissions, 100 per
 * commit, the in-process relay delivers them to `oncebox server` running in its own process, and the
 * clock stops when the last receipt is recorded in the outbox. Default durability (FULL) on both sides.
 */
export async function e2eOncebox(events: number): Promise<number> {
  return withServerAndOutbox(async (box) => {
    const asset = box.asset('batch_ready');
    const started = performance.now();
    let last;
    for (let c = 0; c < events / PER_COMMIT; c++) {
      last = box.commit((tx) => {
        let emission;
        for (let e = 0; e < PER_COMMIT; e++) emission = tx.emit(asset, { partitionKey: `p-${c}-${e}`, extra: { rows: e } });
        return emission!;
      });
      await yieldToRelay();
    }
    await last!.receipt();
    const seconds = (performance.now() - started) / 1000;
    const { pending } = await box.close();
    if (pending !== 0) throw new Error(`e2e: ${pending} rows left pending`);
    return events / seconds;
  });
}

/** `oncebox server` in its own process and an outbox with the in-process relay delivering to it. */
async function withServerAndOutbox<T>(use: (box: Outbox) => Promise<T>): Promise<T> {
  const dir = benchDir();
  const server = await startServerProcess(dir);
  try {
    const box = await openOutbox({
      path: join(dir, 'outbox.db'),
      server: server.url,
      producer: 'bench',
      run: { workflow: 'w', runId: 'r', task: 't', attempt: 1 },
    });
    try {
      return await use(box);
    } finally {
      await box.close({ timeoutMs: 0 });
    }
  } finally {
    await server.stop();
  }
}

/**
 * The raw chain: the same three writes per event with plain better-sqlite3 in one process, no HTTP and
 * no validation. Per batch of 100: insert the outbox rows; insert-first into the server's dedupe table;
 * record the receipts on the outbox rows. Each is its own transaction, with oncebox's durability: FULL
 * for the outbox rows and the server's records, NORMAL for the receipts (which can be fetched again).
 */
export function e2eRawChain(events: number): number {
  const dir = benchDir();
  const outbox = rawOutbox(join(dir, 'raw-outbox.db'));
  const serverDb = new Database(join(dir, 'raw-server.db'));
  serverDb.pragma('journal_mode = WAL');
  serverDb.pragma('synchronous = FULL');
  serverDb.exec('CREATE TABLE dedupe (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, event_id TEXT NOT NULL, ts TEXT NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID');
  const insertDedupe = serverDb.prepare('INSERT INTO dedupe VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING');
  const keys = Array.from({ length: events }, (_, i) =>
    deriveKey({ producer: 'raw', workflow: 'w', runId: 'r', task: 't', asset: 'batch_ready', partitionKey: `p-${i}`, position: null, occurrence: 0 }),
  );
  const commitBatch = outbox.db.transaction((from: number) => {
    for (let i = from; i < from + PER_COMMIT; i++) {
      outbox.insertRow.run({ key: keys[i]!, seq: i + 1, kind: 'event', asset: 'batch_ready', partitionKey: `p-${i}`, extra: `{"rows":${i % PER_COMMIT}}`, checkpointName: null, checkpointValue: null });
    }
  });
  const serverBatch = serverDb.transaction((from: number) => {
    const ids: string[] = [];
    for (let i = from; i < from + PER_COMMIT; i++) {
      const id = uuidv7();
      insertDedupe.run(keys[i], 'f', id, 't', 0);
      ids.push(id);
    }
    return ids;
  });
  const receiptBatch = outbox.db.transaction((from: number, ids: string[]) => {
    for (let i = 0; i < ids.length; i++) outbox.markDelivered.run(ids[i]!, 't', from + i + 1);
  });
  const started = performance.now();
  for (let from = 0; from < events; from += PER_COMMIT) {
    commitBatch.immediate(from);
    const ids = serverBatch.immediate(from);
    // Receipts can be fetched again, so they are written without waiting for fsync, as oncebox does.
    outbox.db.pragma('synchronous = NORMAL');
    receiptBatch.immediate(from, ids);
    outbox.db.pragma('synchronous = FULL');
  }
  const seconds = (performance.now() - started) / 1000;
  outbox.db.close();
  serverDb.close();
  return events / seconds;
}

/** Commit-to-receipt latency at low load: one emission at a time, a pause between them. */
export async function latency(samples: number): Promise<{ p50: number; p99: number }> {
  return withServerAndOutbox(async (box) => {
    const asset = box.asset('batch_ready');
    const times: number[] = [];
    for (let i = 0; i < samples + 20; i++) {
      const started = performance.now();
      await asset.emit({ partitionKey: `l-${i}` });
      if (i >= 20) times.push(performance.now() - started); // the first ones warm up the connection and JIT
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    return { p50: percentile(times, 50), p99: percentile(times, 99) };
  });
}

/**
 * The time of one durable SQLite commit here: a one-row transaction in WAL mode with synchronous=FULL,
 * median of `samples`. Commit to receipt takes two of them (the outbox row, the server's record), so
 * this is the floor that latency is measured against.
 */
export function fsyncMs(samples: number): number {
  const db = new Database(join(benchDir(), 'fsync.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  const times: number[] = [];
  for (let i = 0; i < samples + 10; i++) {
    const started = performance.now();
    insert.run('x');
    if (i >= 10) times.push(performance.now() - started);
  }
  db.close();
  return percentile(times, 50);
}

/**
 * A bare loopback round trip here: a one-item emission body POSTed on a kept-alive connection to a
 * node:http server in its own process that answers without doing anything, median of `samples`.
 * With two durable commits (the producer's row, the server's record) it makes the latency floor.
 */
export async function bareRoundTripMs(samples: number): Promise<number> {
  const server = await spawnServer(['bench/bare-http-server.ts']);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const body = JSON.stringify({
    stream: { producer: 'bench', workflow: 'w', runId: 'r', task: 't', attempt: 1 },
    items: [{ seq: 1, key: uuidv7(), kind: 'event', asset: 'batch_ready', partitionKey: 'l-1', extra: { rows: 1 } }],
  });
  const post = () =>
    new Promise<void>((resolve, reject) => {
      const request = http.request(`${server.url}/v1/emissions`, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (response) => {
        response.resume();
        response.on('end', resolve);
        response.on('error', reject);
      });
      request.on('error', reject);
      request.end(body);
    });
  try {
    const times: number[] = [];
    for (let i = 0; i < samples + 20; i++) {
      const started = performance.now();
      await post();
      if (i >= 20) times.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    return percentile(times, 50);
  } finally {
    agent.destroy();
    await server.stop();
  }
}
