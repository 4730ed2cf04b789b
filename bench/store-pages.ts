/**
 * What one ingest request of 500 new events writes, in each store: the pages the embedded SQLite store
 * appends to its WAL with 20,000 events stored first (automatic checkpoints off, one page per frame), and
 * the WAL bytes PostgreSQL writes after a checkpoint with 100,000 stored first (a page's first change
 * after a checkpoint writes the whole page, so a request whose keys land on a few pages of the key index
 * writes far less than one whose keys land on hundreds). The items are those the relay sends (keys derived from the run and the
 * partition, said to be the run's), so the figure is what a producer's requests cost. Two shapes: every
 * request from one long run (its keys are random among its own), and requests from many runs of 2,000
 * events each (a store shared by many jobs, where the embedded store files each run's keys together).
 * Part of `npm run bench`; `npx tsx bench/store-pages.ts` prints it alone, with the pages each SQLite
 * table and index holds.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type Database from 'better-sqlite3';
import { PostgresDedupeStore, SqliteDedupeStore, type DedupeStore } from '../src/dedupe/index.js';
import { checkItem } from '../src/dedupe/item-check.js';
import { deriveKey } from '../src/outbox/commit/keys.js';
import { benchDir } from './support.js';

const BATCH = 500;
const STORED_FIRST = 40;
const MEASURED = 10;
const PAGE_SIZE = 4096;
const WAL_FRAME_HEADER = 24;
const WAL_HEADER = 32;

/** Requests per run in the many-runs shape: runs of 2,000 events. */
const REQUESTS_PER_RUN = 4;

/**
 * 'one run': every request from one long run. 'many runs': runs of 2,000 events, as the relay sends
 * them. 'many runs, unfiled': the same requests not said to be the run's (an older relay), side by side.
 */
export type Shape = 'one run' | 'many runs' | 'many runs, unfiled';

/** The stream and items of request number `request`: all of one run, or of the run it falls in. */
function request(shape: Shape, request: number) {
  const run = shape === 'one run' ? 0 : Math.floor(request / REQUESTS_PER_RUN);
  const stream = { producer: 'p', workflow: 'w', runId: `r-${run}`, task: 't', attempt: 1 };
  const first = (shape === 'one run' ? request : request % REQUESTS_PER_RUN) * BATCH;
  const items = Array.from({ length: BATCH }, (_, i) => {
    const partitionKey = `p-${request}-${i}`;
    const key = deriveKey({ producer: stream.producer, workflow: stream.workflow, runId: stream.runId, task: stream.task, asset: 'batch_ready', partitionKey, position: null, occurrence: 0 });
    const checked = checkItem({ seq: first + i + 1, key, kind: 'event', asset: 'batch_ready', partitionKey, extra: { rows: i } }, i);
    // What the server makes of the relay's run-keys header for this item.
    return shape === 'many runs, unfiled' || checked.kind !== 'event' ? checked : { ...checked, keyOfRun: true as const };
  });
  return { stream, items };
}

async function ingestRequests(store: DedupeStore, shape: Shape, from: number, to: number): Promise<void> {
  for (let r = from; r < to; r++) {
    const { stream, items } = request(shape, r);
    await store.ingest(stream, items);
  }
}

async function fill(store: DedupeStore, shape: Shape, requests = STORED_FIRST): Promise<void> {
  await store.registerAsset('batch_ready');
  await ingestRequests(store, shape, 0, requests);
}

export interface SqlitePages {
  pagesPerRequest: number;
  /** Pages each table and index holds afterwards, largest first. */
  perTable: { name: string; pages: number }[];
}

export async function sqlitePagesPerRequest(shape: Shape = 'one run'): Promise<SqlitePages> {
  const path = join(benchDir(), 'pages.db');
  const store = new SqliteDedupeStore({ path });
  try {
    await fill(store, shape);
    // The store keeps its connection private; this measurement reads the file's own counters through it.
    const db = (store as unknown as { db: Database.Database }).db;
    db.pragma('wal_checkpoint(TRUNCATE)');
    db.pragma('wal_autocheckpoint = 0');
    await ingestRequests(store, shape, STORED_FIRST, STORED_FIRST + MEASURED);
    const frames = (statSync(`${path}-wal`).size - WAL_HEADER) / (PAGE_SIZE + WAL_FRAME_HEADER);
    const perTable = db.prepare('SELECT name, sum(pgsize) / 4096 AS pages FROM dbstat GROUP BY name ORDER BY pages DESC').all() as { name: string; pages: number }[];
    return { pagesPerRequest: frames / MEASURED, perTable };
  } finally {
    await store.close();
  }
}

/**
 * The embedded store's ingest in this process, no HTTP: `requests` requests of 500 events after 40
 * stored first, one after another, each its own transaction. Events/s and CPU µs per event.
 */
export async function sqliteIngestInProcess(shape: Shape, requests: number): Promise<{ eventsPerS: number; cpuUsPerEvent: number }> {
  const store = new SqliteDedupeStore({ path: join(benchDir(), 'ingest.db') });
  try {
    await fill(store, shape);
    const started = performance.now();
    const cpu = process.cpuUsage();
    await ingestRequests(store, shape, STORED_FIRST, STORED_FIRST + requests);
    const used = process.cpuUsage(cpu);
    const events = requests * BATCH;
    return { eventsPerS: events / ((performance.now() - started) / 1000), cpuUsPerEvent: (used.user + used.system) / events };
  } finally {
    await store.close();
  }
}

/** Requests stored before PostgreSQL's WAL is measured: 100,000 events, a key index of hundreds of pages. */
const PG_STORED_FIRST = 200;

/**
 * WAL kilobytes PostgreSQL writes per request after a checkpoint, measured by its own LSN (null without
 * PostgreSQL).
 */
export async function postgresWalPerRequest(connectionString: string, shape: Shape): Promise<number | null> {
  const schema = `oncebox_bench_pages_${Date.now().toString(36)}`;
  const admin = new pg.Client({ connectionString });
  try {
    await admin.connect();
  } catch {
    return null;
  }
  try {
    const store = await PostgresDedupeStore.open({ connectionString, schema });
    try {
      await fill(store, shape, PG_STORED_FIRST);
      await admin.query('CHECKPOINT');
      const lsn = async () => (await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
      const before = await lsn();
      await ingestRequests(store, shape, PG_STORED_FIRST, PG_STORED_FIRST + MEASURED);
      const after = await lsn();
      const bytes = (await admin.query<{ bytes: string }>('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::text AS bytes', [after, before])).rows[0]!.bytes;
      return Number(bytes) / 1024 / MEASURED;
    } finally {
      await store.close();
    }
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  for (const shape of ['one run', 'many runs', 'many runs, unfiled'] as const) {
    const sqlite = await sqlitePagesPerRequest(shape);
    console.log(`SQLite, ${shape}: ${sqlite.pagesPerRequest} pages written per ${BATCH}-event request (${(sqlite.pagesPerRequest / BATCH).toFixed(2)} per event)`);
    console.table(sqlite.perTable.slice(0, 12));
    if (shape !== 'one run') {
      const ingest = await sqliteIngestInProcess(shape, 360);
      console.log(`  in-process ingest: ${Math.round(ingest.eventsPerS)} events/s, ${ingest.cpuUsPerEvent.toFixed(1)} µs CPU per event`);
    }
  }
  for (const shape of ['one run', 'many runs', 'many runs, unfiled'] as const) {
    const walKb = await postgresWalPerRequest(process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test', shape);
    console.log(walKb === null ? 'PostgreSQL: not reachable' : `PostgreSQL, ${shape}: ${walKb.toFixed(0)} KiB of WAL per ${BATCH}-event request after a checkpoint`);
  }
}
