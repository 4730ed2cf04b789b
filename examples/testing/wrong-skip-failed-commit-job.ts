/**
 * WRONG, on purpose: a commit that throws (a full disk, a file another process holds too long) is logged
 * and the batch skipped, so the job goes on to the next batch, whose checkpoint then counts the skipped
 * one as done: its event is never published, and no retry does it again. A commit that throws wrote
 * nothing; the job must let the error end the attempt (the runner retries it) or commit the batch again.
 * `test/testing/wrong-jobs.test.ts` shows the testing kit catching it.
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
  try {
    box.commit((tx) => {
      tx.set(progress, { batch });
      tx.emit(batchReady, { partitionKey: `batch-${batch}`, extra: { rows: 1000 + batch } });
    });
  } catch (error) {
    console.error(`batch ${batch} skipped: ${(error as Error).message}`); // the bug: the batch is lost
  }
}
const left = await box.close();
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
