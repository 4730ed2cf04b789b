import type Database from 'better-sqlite3';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { openOutbox } from '../src/outbox/index.js';
import { checkpointKey, deriveKey } from '../src/outbox/commit/keys.js';
import { rawOutbox } from './raw-outbox.js';
import { benchDir } from './support.js';

/**
 * Commit throughput: oncebox's commit() against raw better-sqlite3 prepared statements writing the same
 * rows (one outbox row per emission, the checkpoint upsert and the checkpoint's outbox row for the
 * server's mirror) into a hand-written outbox (bench/raw-outbox.ts), in the same
 * transaction mode (BEGIN IMMEDIATE, WAL, synchronous=FULL). The raw side inserts the same key values,
 * computed before its clock starts, and a constant fingerprint, so the gap is everything oncebox does
 * per commit and per emission (validation, deriving the UUIDv5 key, the canonical-JSON fingerprint).
 *
 * fsync time on a shared VM swings by 2x from second to second, so the two sides run in alternating
 * slices of a few commits each, over two open files, and each side's time is summed over its slices:
 * both see the same disk weather.
 */
export async function commitBench(perCommit: number, rows: number, slices: number) {
  const dir = benchDir();
  const commits = Math.max(slices, Math.floor(rows / perCommit));
  const perSlice = Math.max(1, Math.floor(commits / slices));

  const box = await openOutbox({
    path: join(dir, `oncebox-${perCommit}.db`),
    server: 'http://127.0.0.1:9',
    relay: 'manual',
    producer: 'bench',
    run: { workflow: 'w', runId: 'r', task: 't', attempt: 1 },
  });
  const asset = box.asset('batch_ready');
  const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
  const onceboxCommit = (c: number) =>
    box.commit((tx) => {
      tx.set(progress, { batch: c });
      for (let e = 0; e < perCommit; e++) tx.emit(asset, { partitionKey: `batch-${c}-${e}`, extra: { rows: e } });
    });

  const raw = rawOutbox(join(dir, `raw-${perCommit}.db`));
  const keys = Array.from({ length: (commits + PAGE_SAMPLE_COMMITS) * perCommit }, (_, i) =>
    deriveKey({ producer: 'raw', workflow: 'w', runId: 'r', task: 't', asset: 'batch_ready', partitionKey: `batch-${i}`, position: null, occurrence: 0 }),
  );
  const checkpointKeys = Array.from({ length: commits + PAGE_SAMPLE_COMMITS }, (_, c) => checkpointKey('raw', { workflow: 'w', runId: 'r', task: 't', attempt: 1 }, c + 1));
  const rawCommit = raw.db.transaction((c: number) => {
    raw.setCheckpoint.run('backlog', `{"batch":${c}}`);
    for (let e = 0; e < perCommit; e++) {
      raw.insertRow.run({
        key: keys[c * perCommit + e]!,
        seq: c * perCommit + e + 1,
        kind: 'event',
        asset: 'batch_ready',
        partitionKey: `batch-${c}-${e}`,
        extra: `{"rows":${e}}`,
        checkpointName: null,
        checkpointValue: null,
      });
    }
    // oncebox also queues the checkpoint update for the server's mirror, after the commit's emissions.
    raw.insertRow.run({
      key: checkpointKeys[c]!,
      seq: 1_000_000_000 + c,
      kind: 'checkpoint',
      asset: '',
      partitionKey: null,
      extra: null,
      checkpointName: 'backlog',
      checkpointValue: `{"batch":${c}}`,
    });
  });

  // The first tenth of the slices warms both sides up (JIT, caches) and is not timed: the figure is
  // each side's steady state.
  const warmup = Math.floor(slices / 10) * perSlice;
  let onceboxMs = 0;
  let rawMs = 0;
  let timed = 0;
  for (let c = 0; c + perSlice <= commits; c += perSlice) {
    let started = performance.now();
    for (let i = c; i < c + perSlice; i++) onceboxCommit(i);
    const onceboxSlice = performance.now() - started;
    started = performance.now();
    for (let i = c; i < c + perSlice; i++) rawCommit.immediate(i);
    const rawSlice = performance.now() - started;
    if (c < warmup) continue;
    onceboxMs += onceboxSlice;
    rawMs += rawSlice;
    timed += perSlice;
  }
  const done = timed * perCommit;
  const onceboxPages = walPagesPerCommit(box.file.db, box.file.path, (i) => onceboxCommit(commits + i));
  const rawPages = walPagesPerCommit(raw.db, join(dir, `raw-${perCommit}.db`), (i) => rawCommit.immediate(commits + i));
  await box.close({ timeoutMs: 0 });
  raw.db.close();
  const onceboxRowsPerS = done / (onceboxMs / 1000);
  const rawRowsPerS = done / (rawMs / 1000);
  return { onceboxRowsPerS, rawRowsPerS, ratio: onceboxRowsPerS / rawRowsPerS, onceboxPages, rawPages };
}

const PAGE_SAMPLE_COMMITS = 20;

/**
 * Pages written per commit, read from the WAL: emptied first, with automatic checkpoints off, then
 * PAGE_SAMPLE_COMMITS commits; each frame of the WAL is one page written.
 */
function walPagesPerCommit(db: Database.Database, path: string, commit: (i: number) => void): number {
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.pragma('wal_autocheckpoint = 0');
  for (let i = 0; i < PAGE_SAMPLE_COMMITS; i++) commit(i);
  const pageSize = db.pragma('page_size', { simple: true }) as number;
  const frames = (statSync(`${path}-wal`).size - 32) / (pageSize + 24);
  db.pragma('wal_autocheckpoint = 1000');
  return frames / PAGE_SAMPLE_COMMITS;
}
