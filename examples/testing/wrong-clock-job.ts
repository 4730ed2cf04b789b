/**
 * WRONG, on purpose: each event carries the time it was made. A re-run of batch N (after a crash, or a
 * task retry on a fresh machine) emits batch N with another payload: the server refuses it as a
 * conflict, or, on a fresh run, downstream sees two versions of one batch. `ingest-job.test.ts` shows the
 * testing kit catching it.
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
  box.commit((tx) => {
    tx.set(progress, { batch });
    tx.emit(batchReady, { partitionKey: `batch-${batch}`, extra: { rows: 1000 + batch, at: new Date().toISOString() } }); // the bug: a clock
  });
}
const left = await box.close();
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
