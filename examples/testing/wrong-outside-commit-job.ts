/**
 * WRONG, on purpose: the checkpoint is committed first, and the event is emitted after it, in a commit of
 * its own. A crash between the two leaves the checkpoint saying batch N is done with no event for it: the
 * retry resumes after batch N, and batch N is never announced. `ingest-job.test.ts` shows the testing kit
 * catching it.
 */
import { z } from 'zod';
import { openOutbox } from '../../src/outbox/index.js';

const BATCHES = 4;
const { ONCEBOX_OUTBOX, ONCEBOX_SERVER, ONCEBOX_RUN_ID, ONCEBOX_ATTEMPT } = process.env;

const box = await openOutbox({
  path: ONCEBOX_OUTBOX!,
  server: ONCEBOX_SERVER!,
  producer: 'orders-ingest',
  run: { workflow: 'orders', runId: ONCEBOX_RUN_ID!, attempt: Number(ONCEBOX_ATTEMPT) },
});
const batchReady = box.asset('batch_ready');
const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
for (let batch = (progress.get()?.batch ?? 0) + 1; batch <= BATCHES; batch++) {
  box.commit((tx) => tx.set(progress, { batch }));
  batchReady.emit({ partitionKey: `batch-${batch}`, extra: { rows: 1000 + batch } }).catch(() => undefined); // the bug: outside the checkpoint's commit
}
const left = await box.close();
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
