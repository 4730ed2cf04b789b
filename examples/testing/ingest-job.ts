/**
 * A batch ingestion job written the way oncebox asks, and the one `ingest-job.test.ts` property-tests:
 * batch N's data write overwrites batch N, and its checkpoint and its event are committed in one
 * transaction. It takes everything from the environment the testing kit gives each attempt.
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { openOutbox } from '../../src/outbox/index.js';

const BATCHES = 4;
const { ONCEBOX_OUTBOX, ONCEBOX_SERVER, ONCEBOX_RUN_ID, ONCEBOX_ATTEMPT, ONCEBOX_DATA } = process.env;

/** The data write: batch N is written whole to its own file, replacing what was there. */
function writeBatch(batch: number): number {
  const rows = 1000 + batch;
  mkdirSync(ONCEBOX_DATA!, { recursive: true });
  const path = join(ONCEBOX_DATA!, `batch-${batch}.json`);
  writeFileSync(`${path}.${process.pid}.tmp`, JSON.stringify({ batch, rows }));
  renameSync(`${path}.${process.pid}.tmp`, path);
  return rows;
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
// The run's end, with its last event, in one transaction: a retry after it publishes nothing new.
box.complete((tx) => tx.emit(box.asset('ingest_done'), { partitionKey: ONCEBOX_RUN_ID! }));
const left = await box.close();
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
