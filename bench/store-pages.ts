/**
 * npx tsx bench/store-pages.ts: pages the embedded SQLite store writes per ingest request of 500 new
 * events, with 20,000 events stored first (the WAL emptied, automatic checkpoints off, 10 requests, one
 * page per WAL frame), and the pages each table and index holds (dbstat).
 */
import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { v4 as uuidv4 } from 'uuid';
import Database from 'better-sqlite3';
import { SqliteDedupeStore } from '../src/dedupe/index.js';
import { checkItem } from '../src/dedupe/item-check.js';
const dir = mkdtempSync(join(tmpdir(), 'pages-'));
const path = join(dir, 's.db');
const store = new SqliteDedupeStore({ path });
await store.registerAsset('batch_ready');
const BATCH = 500;
const batch = (r: number) => Array.from({ length: BATCH }, (_, i) => checkItem({ seq: r * BATCH + i + 1, key: uuidv4(), kind: 'event', asset: 'batch_ready', partitionKey: `p-${r}-${i}`, extra: { rows: i } }, i));
const stream = { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 };
for (let r = 0; r < 40; r++) await store.ingest(stream, batch(r)); // 20,000 events stored first
const db = (store as unknown as { db: Database.Database }).db;
db.pragma('wal_checkpoint(TRUNCATE)');
db.pragma('wal_autocheckpoint = 0');
const N = 10;
for (let r = 40; r < 40 + N; r++) await store.ingest(stream, batch(r));
const frames = (statSync(`${path}-wal`).size - 32) / (4096 + 24);
const perTable = db.prepare("SELECT name, sum(pgsize)/4096 AS pages FROM dbstat GROUP BY name ORDER BY pages DESC").all();
console.log('pages per 500-item request', frames / N, 'pages per event', frames / N / BATCH);
console.log(perTable.slice(0, 12));
await store.close();
