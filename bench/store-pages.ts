/**
 * What one ingest request of 500 new events writes, in each store, with 20,000 events of the same run
 * stored first: the pages the embedded SQLite store appends to its WAL (automatic checkpoints off, one
 * page per frame), and the WAL bytes PostgreSQL writes. The keys are those the relay sends (derived from
 * the run and the emission), so the figure is what a producer's requests cost. Part of `npm run bench`;
 * `npx tsx bench/store-pages.ts` prints it alone, with the pages each SQLite table and index holds.
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

const stream = { producer: 'p', workflow: 'w', runId: 'r', task: 't', attempt: 1 };

function batch(request: number) {
  return Array.from({ length: BATCH }, (_, i) => {
    const partitionKey = `p-${request}-${i}`;
    const key = deriveKey({ producer: stream.producer, workflow: stream.workflow, runId: stream.runId, task: stream.task, asset: 'batch_ready', partitionKey, position: null, occurrence: 0 });
    return checkItem({ seq: request * BATCH + i + 1, key, kind: 'event', asset: 'batch_ready', partitionKey, extra: { rows: i } }, i);
  });
}

async function fill(store: DedupeStore): Promise<void> {
  await store.registerAsset('batch_ready');
  for (let r = 0; r < STORED_FIRST; r++) await store.ingest(stream, batch(r));
}

export interface SqlitePages {
  pagesPerRequest: number;
  /** Pages each table and index holds afterwards, largest first. */
  perTable: { name: string; pages: number }[];
}

export async function sqlitePagesPerRequest(): Promise<SqlitePages> {
  const path = join(benchDir(), 'pages.db');
  const store = new SqliteDedupeStore({ path });
  try {
    await fill(store);
    // The store keeps its connection private; this measurement reads the file's own counters through it.
    const db = (store as unknown as { db: Database.Database }).db;
    db.pragma('wal_checkpoint(TRUNCATE)');
    db.pragma('wal_autocheckpoint = 0');
    for (let r = STORED_FIRST; r < STORED_FIRST + MEASURED; r++) await store.ingest(stream, batch(r));
    const frames = (statSync(`${path}-wal`).size - WAL_HEADER) / (PAGE_SIZE + WAL_FRAME_HEADER);
    const perTable = db.prepare('SELECT name, sum(pgsize) / 4096 AS pages FROM dbstat GROUP BY name ORDER BY pages DESC').all() as { name: string; pages: number }[];
    return { pagesPerRequest: frames / MEASURED, perTable };
  } finally {
    await store.close();
  }
}

/** WAL kilobytes PostgreSQL writes per request, measured by its own LSN (null without PostgreSQL). */
export async function postgresWalPerRequest(connectionString: string): Promise<number | null> {
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
      await fill(store);
      await admin.query('CHECKPOINT');
      const lsn = async () => (await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
      const before = await lsn();
      for (let r = STORED_FIRST; r < STORED_FIRST + MEASURED; r++) await store.ingest(stream, batch(r));
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
  const sqlite = await sqlitePagesPerRequest();
  console.log(`SQLite: ${sqlite.pagesPerRequest} pages written per ${BATCH}-event request (${(sqlite.pagesPerRequest / BATCH).toFixed(2)} per event)`);
  console.table(sqlite.perTable.slice(0, 12));
  const walKb = await postgresWalPerRequest(process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test');
  console.log(walKb === null ? 'PostgreSQL: not reachable' : `PostgreSQL: ${walKb.toFixed(0)} KiB of WAL per ${BATCH}-event request`);
}
