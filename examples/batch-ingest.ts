/**
 * The main oncebox job: a batch ingestion loop that writes batch N, then commits its checkpoint and
 * its "batch N is ready" event in one SQLite transaction. The demo and the crash tests run it as a
 * child process and kill it.
 *
 *   tsx examples/batch-ingest.ts --db FILE --server URL --data DIR --run-id ID --attempt N [--task ingest] [--batches 50] [--partition-prefix P] [--relay external]
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { FencedError, openOutbox } from '../src/outbox/index.js';

const { values: args } = parseArgs({
  options: {
    db: { type: 'string' },
    // Several --server flags: instances of one server over a shared PostgreSQL database, to fail over between.
    server: { type: 'string', multiple: true },
    data: { type: 'string' },
    producer: { type: 'string', default: 'orders-ingest' },
    'run-id': { type: 'string', default: '2026-11-30' },
    task: { type: 'string', default: 'ingest' },
    attempt: { type: 'string', default: '1' },
    batches: { type: 'string', default: '50' },
    /** Put before "batch-NNNN" in partition keys, so that several runs' batches stay apart downstream. */
    'partition-prefix': { type: 'string', default: '' },
    'pause-ms': { type: 'string', default: '0' },
    /** 'external' leaves delivery to a separate `oncebox relay` process on the same file. */
    relay: { type: 'string', default: 'in-process' },
    /** Crash simulation for the demo and the crash tests: SIGKILL this process before committing batch K. */
    'kill-before-commit': { type: 'string' },
  },
  strict: true,
});
if (!args.db || !args.server?.length || !args.data) {
  console.error('usage: batch-ingest --db FILE --server URL --data DIR [--run-id ID] [--attempt N] [--batches N]');
  process.exit(2);
}

/**
 * Writing a batch is idempotent: batch N always lands in the same file, replaced whole. The temporary
 * file is this process's own, since a zombie and its retry on one machine may write the same batch at once.
 */
function writeBatch(dir: string, batch: number, rows: number): void {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `batch-${batch}.json`);
  writeFileSync(`${path}.${process.pid}.tmp`, JSON.stringify({ batch, rows }));
  renameSync(`${path}.${process.pid}.tmp`, path);
}

const box = await openOutbox({
  path: args.db,
  server: args.server.length === 1 ? args.server[0] : args.server,
  producer: args.producer,
  run: { workflow: 'orders', runId: args['run-id'], task: args.task, attempt: Number(args.attempt) },
  relay: args.relay === 'external' ? 'external' : 'in-process',
});
const batchReady = box.asset('batch_ready');
const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
const total = Number(args.batches);
const partitionOf = (batch: number) => `${args['partition-prefix']}batch-${String(batch).padStart(4, '0')}`;
const pauseMs = Number(args['pause-ms']);

// On a fresh machine, a retry has just adopted the server's copy of the checkpoint.
const resumeFrom = progress.get()?.batch ?? 0;
console.log(JSON.stringify({ event: 'start', attempt: Number(args.attempt), resumeFrom, fromServer: box.resumedFrom !== undefined }));
try {
  for (let batch = resumeFrom + 1; batch <= total; batch++) {
    const rows = 1000 + batch;
    writeBatch(args.data, batch, rows);
    if (Number(args['kill-before-commit']) === batch) process.kill(process.pid, 'SIGKILL');
    box.commit((tx) => {
      tx.set(progress, { batch });
      tx.emit(batchReady, { partitionKey: partitionOf(batch), extra: { rows } });
    });
    console.log(JSON.stringify({ event: 'committed', batch }));
    if (pauseMs > 0) await sleep(pauseMs);
  }
} catch (error) {
  // A zombie: a later attempt of this run has delivered. Stop; that attempt does the work.
  if (!(error instanceof FencedError)) throw error;
  console.log(JSON.stringify({ event: 'fenced', attempt: error.attempt, by: error.fencedBy }));
  await box.close({ timeoutMs: 0 });
  process.exit(3);
}
const { pending, dead } = await box.close({ timeoutMs: 30_000 });
console.log(JSON.stringify({ event: 'done', pending, dead }));
process.exit(pending === 0 && dead === 0 ? 0 : 1);
