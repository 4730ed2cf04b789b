import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { v4 as uuidv4 } from 'uuid';
import { benchDir, repo } from './support.js';

export const PG_URL = process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const BATCH = 500;
const CLIENTS = 8;

interface Instance {
  url: string;
  stop(): Promise<void>;
}

/** `oncebox server` processes over one store: a SQLite file, or a PostgreSQL schema shared by all. */
async function startInstances(db: string, count: number, schema?: string): Promise<Instance[]> {
  const dir = benchDir();
  writeFileSync(join(dir, 'assets.txt'), 'batch_ready\n');
  const starting = Array.from({ length: count }, () => {
    const args = ['--import', 'tsx', 'src/cli/main.ts', 'server', '--db', db, '--port', '0', '--assets', join(dir, 'assets.txt')];
    if (schema) args.push('--schema', schema);
    const child = spawn(process.execPath, args, { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] });
    return new Promise<Instance>((resolve, reject) => {
      let buffered = '';
      child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
        buffered += chunk;
        const match = /"url":"([^"]+)"/.exec(buffered);
        if (match) {
          resolve({
            url: match[1]!,
            stop: () =>
              new Promise((done) => {
                child.once('exit', () => done());
                child.kill('SIGTERM');
              }),
          });
        }
      });
      child.on('exit', (code) => reject(new Error(`server exited ${code}`)));
    });
  });
  return Promise.all(starting);
}

/** Events/s that CLIENTS concurrent clients get stored, BATCH per request, spread over the instances. */
async function drive(instances: Instance[], events: number): Promise<number> {
  const perClient = Math.ceil(events / CLIENTS / BATCH);
  const run = `bench-${uuidv4()}`;
  const bodies = Array.from({ length: CLIENTS }, (_, client) =>
    Array.from({ length: perClient }, (_, request) =>
      JSON.stringify({
        stream: { producer: 'bench', workflow: 'w', runId: `${run}-${client}`, task: null, attempt: 1 },
        items: Array.from({ length: BATCH }, (_, i) => ({
          seq: request * BATCH + i + 1,
          key: uuidv4(),
          kind: 'event',
          asset: 'batch_ready',
          partitionKey: `p-${request}-${i}`,
          extra: { rows: i },
        })),
      }),
    ),
  );
  const started = performance.now();
  await Promise.all(
    bodies.map(async (requests, client) => {
      const url = `${instances[client % instances.length]!.url}/v1/emissions`;
      for (const body of requests) {
        const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        if (!response.ok) throw new Error(`ingest bench: ${response.status} ${await response.text()}`);
        await response.arrayBuffer();
      }
    }),
  );
  return (CLIENTS * perClient * BATCH) / ((performance.now() - started) / 1000);
}

export async function pgIngest(events: number, instanceCount: number, schema = `oncebox_bench_${Date.now().toString(36)}_${instanceCount}`): Promise<number> {
  const instances = await startInstances(PG_URL, instanceCount, schema);
  try {
    return await drive(instances, events);
  } finally {
    await Promise.all(instances.map((instance) => instance.stop()));
    await dropSchema(schema);
  }
}

export async function sqliteIngest(events: number): Promise<number> {
  const instances = await startInstances(join(benchDir(), 'server.db'), 1);
  try {
    return await drive(instances, events);
  } finally {
    await instances[0]!.stop();
  }
}

/** Raw `INSERT … ON CONFLICT DO NOTHING` of the same batches through pg, on as many connections. */
export async function pgRawInsert(events: number): Promise<number> {
  const schema = `oncebox_bench_raw_${Date.now().toString(36)}`;
  const pool = new pg.Pool({ connectionString: PG_URL, max: CLIENTS });
  await pool.query(`CREATE SCHEMA ${schema}`);
  await pool.query(`CREATE TABLE ${schema}.dedupe (key text PRIMARY KEY, fingerprint text NOT NULL, event_id text NOT NULL, ts text NOT NULL, created_at bigint NOT NULL)`);
  const perClient = Math.ceil(events / CLIENTS / BATCH);
  const batches = Array.from({ length: CLIENTS * perClient }, () => Array.from({ length: BATCH }, () => uuidv4()));
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, client) => {
      for (let i = client; i < batches.length; i += CLIENTS) {
        const keys = batches[i]!;
        await pool.query(
          `INSERT INTO ${schema}.dedupe SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) ON CONFLICT (key) DO NOTHING`,
          [keys, keys.map(() => 'fingerprint'), keys, keys.map(() => 'ts'), keys.map(() => 0)],
        );
      }
    }),
  );
  const rate = (batches.length * BATCH) / ((performance.now() - started) / 1000);
  await pool.query(`DROP SCHEMA ${schema} CASCADE`);
  await pool.end();
  return rate;
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
 * The PostgreSQL store's ingest rate with `keys` dedupe records already stored, against the rate on a
 * nearly empty store. The records are written straight into the schema with generate_series, in
 * random key order, as a long-lived store would hold them.
 */
export async function pgIngestAtSize(events: number, keys: number): Promise<number> {
  const schema = `oncebox_bench_size_${Date.now().toString(36)}`;
  // Starting (and stopping) one instance creates the schema at its current version.
  const first = await startInstances(PG_URL, 1, schema);
  await first[0]!.stop();
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(
    `INSERT INTO ${schema}.dedupe (key, fingerprint, event_id, ts, created_at)
     SELECT md5(i::text)::uuid::text, 'f', md5(i::text), '2026-01-01T00:00:00.000Z', 0 FROM generate_series(1, $1::integer) AS i`,
    [keys],
  );
  await client.query(`VACUUM ANALYZE ${schema}.dedupe`);
  await client.end();
  return pgIngest(events, 1, schema);
}

async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}
