/**
 * WRONG, on purpose: the data write appends batch N's rows to its file instead of replacing it. A retry
 * that writes batch N again (it crashed after the write, before the commit) doubles the batch, and the
 * event reports the doubled count. `ingest-job.test.ts` shows the testing kit catching it.
 */
import { appendFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { openOutbox } from '../../src/outbox/index.js';

const BATCHES = 4;
const { ONCEBOX_OUTBOX, ONCEBOX_SERVER, ONCEBOX_RUN_ID, ONCEBOX_ATTEMPT, ONCEBOX_DATA } = process.env;

function writeBatch(batch: number): number {
  mkdirSync(ONCEBOX_DATA!, { recursive: true });
  const path = join(ONCEBOX_DATA!, `batch-${batch}.csv`);
  appendFileSync(path, Array.from({ length: 3 }, (_, row) => `${batch},${row}\n`).join('')); // the bug: append
  return readFileSync(path, 'utf8').trim().split('\n').length;
}

const box = await openOutbox({
  path: ONCEBOX_OUTBOX!,
  server: ONCEBOX_SERVER!,
  producer: 'orders-ingest',
  run: { workflow: 'orders', runId: ONCEBOX_RUN_ID!, attempt: Number(ONCEBOX_ATTEMPT) },
});
const batchReady = box.asset('batch_ready');
const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
for (let batch = (progress.get()?.batch ?? 0) + 1; batch <= BATCHES; batch++) {
  const rows = writeBatch(batch);
  box.commit((tx) => {
    tx.set(progress, { batch });
    tx.emit(batchReady, { partitionKey: `batch-${batch}`, extra: { rows } });
  });
}
const left = await box.close();
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
