import Database from 'better-sqlite3';
import { RUN_KEYS_HEADER } from '../src/protocol/run-keys.js';
import http from 'node:http';
import { join } from 'node:path';
import pg from 'pg';
import { v4 as uuidv4 } from 'uuid';
import { createRawDedupeTable, rawInsert } from './raw-insert.js';
import { benchDir, cpuSeconds, median, spawnServer, startOnceboxServer, startServerProcess, type ServerProcess } from './support.js';

export const PG_URL = process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const BATCH = 500;
const CLIENTS = 8;

/** One ingest measurement: the rate, and how many of the machine's cores all the processes kept busy. */
export interface IngestRun {
  eventsPerS: number;
  /** CPU seconds of the client, the servers and PostgreSQL per wall second; null without /proc. */
  coresBusy: number | null;
  /** CPU microseconds of the servers and PostgreSQL (not the load generator) per event stored; null without /proc. */
  serverCpuUsPerEvent: number | null;
  /** The part of serverCpuUsPerEvent spent in PostgreSQL's own processes. */
  postgresCpuUsPerEvent: number | null;
}

function requestBody(runId: string, request: number): string {
  return JSON.stringify({
    stream: { producer: 'bench', workflow: 'w', runId, task: null, attempt: 1 },
    items: Array.from({ length: BATCH }, (_, i) => ({
      seq: request * BATCH + i + 1,
      key: uuidv4(),
      kind: 'event',
      asset: 'batch_ready',
      partitionKey: `p-${request}-${i}`,
      extra: { rows: i },
    })),
  });
}

/** One keep-alive connection per client: the load generator should cost the machine as little as it can. */
const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });

function postJson(url: string, body: string, fullBatch = true): Promise<void> {
  return new Promise((resolve, reject) => {
    // Every item's key is said to be its run's, as the relay says of keys derived from the run and a partition.
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), [RUN_KEYS_HEADER]: fullBatch ? `0-${BATCH - 1}` : '0' };
    const request = http.request(url, { method: 'POST', agent, headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => {
        if (response.statusCode === 200) resolve();
        else reject(new Error(`ingest bench: ${response.statusCode} ${Buffer.concat(chunks).toString()}`));
      });
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(body);
  });
}

/** Sends each client's requests one after another, all clients at once, spread over the servers. */
async function send(servers: readonly ServerProcess[], bodies: readonly string[][]): Promise<void> {
  await Promise.all(
    bodies.map(async (requests, client) => {
      const url = `${servers[client % servers.length]!.url}/v1/emissions`;
      for (const body of requests) await postJson(url, body);
    }),
  );
}

/**
 * Events/s that CLIENTS concurrent clients get stored, BATCH per request, spread over the servers. A
 * warm-up of a few requests per client runs first, so that the figure is the servers' steady state and
 * not their JIT compiling. With `readable`, the work ends when a reader can page through the events
 * (one read after the last request): a store that numbers events for readers only when they read
 * (PostgreSQL's sequencer before store migration 011) pays for it inside the measurement, as a
 * deployment with consumers does. The HTTP floor server has no read API, and no cursors to give.
 */
async function drive(servers: readonly ServerProcess[], events: number, readable = true): Promise<IngestRun> {
  const perClient = Math.ceil(events / CLIENTS / BATCH);
  const run = `bench-${uuidv4()}`;
  const warmup = Array.from({ length: CLIENTS }, (_, client) => Array.from({ length: 4 }, (_, request) => requestBody(`${run}-warmup-${client}`, request)));
  await send(servers, warmup);
  const bodies = Array.from({ length: CLIENTS }, (_, client) => Array.from({ length: perClient }, (_, request) => requestBody(`${run}-${client}`, request)));
  const pids = servers.map((server) => server.child.pid!);
  return measure(CLIENTS * perClient * BATCH, pids, async () => {
    await send(servers, bodies);
    if (readable) await fetch(`${servers[0]!.url}/v1/events?limit=1&after=0`).then((response) => response.arrayBuffer());
  });
}

/** Times `work`, which stores `events` events, and reads how many cores it and `pids` kept busy. */
async function measure(events: number, pids: readonly number[], work: () => Promise<void>): Promise<IngestRun> {
  const cpuBefore = cpuSeconds(pids);
  const serverBefore = cpuSeconds(pids, false);
  const postgresBefore = cpuSeconds([], false);
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  const cpuAfter = cpuSeconds(pids);
  const serverAfter = cpuSeconds(pids, false);
  const postgresAfter = cpuSeconds([], false);
  return {
    postgresCpuUsPerEvent: postgresBefore === null || postgresAfter === null ? null : ((postgresAfter - postgresBefore) * 1e6) / events,
    eventsPerS: events / seconds,
    coresBusy: cpuBefore === null || cpuAfter === null ? null : (cpuAfter - cpuBefore) / seconds,
    serverCpuUsPerEvent: serverBefore === null || serverAfter === null ? null : ((serverAfter - serverBefore) * 1e6) / events,
  };
}

/** `oncebox server` instances over one PostgreSQL schema. */
export async function pgIngest(events: number, instanceCount: number, schema = uniqueSchema(`oncebox_bench_${instanceCount}`)): Promise<IngestRun> {
  const dir = benchDir();
  const servers = await Promise.all(Array.from({ length: instanceCount }, () => startOnceboxServer(dir, PG_URL, schema)));
  try {
    return await drive(servers, events);
  } finally {
    await Promise.all(servers.map((server) => server.stop()));
    await dropSchema(schema);
  }
}

/**
 * Requests/s of one-event requests from `clients` clients at once (each its own stream), one instance
 * over PostgreSQL, while a consumer pages through the events as they come: many small producers, where
 * what bounds the rate is the commits, not the CPU an event costs.
 */
export async function pgSmallRequests(clients: number, perClient: number): Promise<number> {
  const schema = uniqueSchema('oncebox_bench_small_requests');
  const server = await startOnceboxServer(benchDir(), PG_URL, schema);
  const body = (client: number, seq: number) =>
    JSON.stringify({
      stream: { producer: 'bench', workflow: 'w', runId: `small-${client}`, task: null, attempt: 1 },
      items: [{ seq, key: uuidv4(), kind: 'event', asset: 'batch_ready', partitionKey: `p-${seq}` }],
    });
  const url = `${server.url}/v1/emissions`;
  try {
    const warmup = 5;
    await Promise.all(Array.from({ length: clients }, async (_, client) => {
      for (let seq = 1; seq <= warmup; seq++) await postJson(url, body(client, seq), false);
    }));
    let reading = true;
    const reader = (async () => {
      for (let after = 0; reading; await new Promise((resolve) => setTimeout(resolve, 20))) {
        after = ((await (await fetch(`${server.url}/v1/events?after=${after}&limit=1000`)).json()) as { next: number }).next;
      }
    })();
    const started = performance.now();
    await Promise.all(Array.from({ length: clients }, async (_, client) => {
      for (let seq = warmup + 1; seq <= warmup + perClient; seq++) await postJson(url, body(client, seq), false);
    }));
    const rate = (clients * perClient) / ((performance.now() - started) / 1000);
    reading = false;
    await reader;
    return rate;
  } finally {
    await server.stop();
    await dropSchema(schema);
  }
}

/** The reference HTTP server of bench/http-floor-server.ts: the ceiling for any HTTP ingest server here. */
export async function pgHttpFloor(events: number): Promise<IngestRun> {
  const schema = uniqueSchema('oncebox_bench_floor');
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`CREATE SCHEMA ${schema}`);
  await client.end();
  const server = await spawnServer(['bench/http-floor-server.ts', PG_URL, schema]);
  try {
    return await drive([server], events, false);
  } finally {
    await server.stop();
    await dropSchema(schema);
  }
}

export async function sqliteIngest(events: number): Promise<IngestRun> {
  const server = await startServerProcess(benchDir());
  try {
    return await drive([server], events);
  } finally {
    await server.stop();
  }
}

function uniqueSchema(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6).toString(36)}`;
}

/** Raw `INSERT … ON CONFLICT DO NOTHING` of the same batches through pg, on as many connections. */
export async function pgRawInsert(events: number): Promise<IngestRun> {
  const schema = uniqueSchema('oncebox_bench_raw');
  const pool = new pg.Pool({ connectionString: PG_URL, max: CLIENTS });
  await pool.query(`CREATE SCHEMA ${schema}`);
  await createRawDedupeTable(pool, schema);
  const perClient = Math.ceil(events / CLIENTS / BATCH);
  const batches = Array.from({ length: CLIENTS * perClient }, () => Array.from({ length: BATCH }, () => uuidv4()));
  const run = await measure(batches.length * BATCH, [], async () => {
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, client) => {
        for (let i = client; i < batches.length; i += CLIENTS) await rawInsert(pool, schema, batches[i]!);
      }),
    );
  });
  await pool.query(`DROP SCHEMA ${schema} CASCADE`);
  await pool.end();
  return run;
}

/** Raw better-sqlite3 inserting the same batches into a dedupe table, one FULL transaction per batch. */
export function sqliteRawInsert(events: number): number {
  const db = new Database(join(benchDir(), 'raw.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE dedupe (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, event_id TEXT NOT NULL, ts TEXT NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID');
  const insert = db.prepare('INSERT INTO dedupe VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING');
  const batch = db.transaction((keys: string[]) => {
    for (const key of keys) insert.run(key, 'fingerprint', key, 'ts', 0);
  });
  const batches = Array.from({ length: Math.ceil(events / BATCH) }, () => Array.from({ length: BATCH }, () => uuidv4()));
  const started = performance.now();
  for (const keys of batches) batch.immediate(keys);
  const rate = (batches.length * BATCH) / ((performance.now() - started) / 1000);
  db.close();
  return rate;
}

/**
 * The PostgreSQL store's ingest rate as it grows: one store holding `small` dedupe records and one
 * holding `large`, both written with generate_series in random key order before any clock starts, as a
 * long-lived store would hold them. Each measurement starts right after a CHECKPOINT, so that both
 * stores start from the same state: the first change to each page after a checkpoint writes the whole
 * page to the WAL, and a large store has many more pages to touch. Medians of `rounds` alternating runs.
 */
export async function pgIngestGrowth(events: number, small: number, large: number, rounds: number): Promise<{ small: number; large: number }> {
  const schemas = [uniqueSchema('oncebox_bench_small'), uniqueSchema('oncebox_bench_large')];
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  const servers: ServerProcess[] = [];
  try {
    for (const [index, keys] of [small, large].entries()) {
      const schema = schemas[index]!;
      // Starting (and stopping) one instance creates the schema at its current version.
      await (await startOnceboxServer(benchDir(), PG_URL, schema)).stop();
      await client.query(
        `INSERT INTO ${schema}.dedupe (producer, key, fingerprint, event_id, ts, created_at)
         SELECT 'bench', md5(i::text)::uuid, 'f', md5(i::text)::uuid, '2026-01-01T00:00:00.000Z', 0 FROM generate_series(1, $1::integer) AS i`,
        [keys],
      );
      await client.query(`VACUUM ANALYZE ${schema}.dedupe`);
      servers.push(await startOnceboxServer(benchDir(), PG_URL, schema));
    }
    const rates: [number[], number[]] = [[], []];
    for (let round = 0; round < rounds; round++) {
      for (const index of [0, 1]) {
        await client.query('CHECKPOINT');
        rates[index]!.push((await drive([servers[index]!], events)).eventsPerS);
      }
    }
    return { small: median(rates[0]), large: median(rates[1]) };
  } finally {
    await Promise.all(servers.map((server) => server.stop()));
    for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  }
}

async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}
