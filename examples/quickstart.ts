// The README's quickstart, kept as a file so that it is type-checked and run by the tests.
import { z } from 'zod';
import { openOutbox, scheduledRun, type Emission } from '../src/outbox/index.js';

const storage = { writeBatch: async (batch: number) => void batch }; // your idempotent data write

// The job's token comes from ONCEBOX_TOKEN in its environment, never from the code.
const box = await openOutbox({
  path: process.env.ONCEBOX_OUTBOX ?? '.oncebox/orders-ingest.db',
  server: process.env.ONCEBOX_SERVER ?? 'http://127.0.0.1:8787',
  producer: 'orders-ingest',
  // Today's run (a daily job under cron): a re-run today resumes it, tomorrow's is a run of its own. Its
  // attempt is claimed from the server, one above the last. Under Airflow or CI: runFromEnvironment().
  run: scheduledRun({ workflow: 'orders', task: 'ingest', every: 'day' }),
}).catch((error: Error) => {
  console.error(`cannot start: ${error.message}`); // a refused token, a file that is not an outbox: the fix is named
  process.exit(1);
});
const batchReady = box.asset('batch_ready');
const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
const start = (progress.get()?.batch ?? 0) + 1; // a second run resumes from the checkpoint
const { runId, attempt } = box.run!; // the attempt the server handed out
console.log(`run ${runId}, attempt ${attempt}: ${start === 1 ? 'starting at batch 1' : `resuming at batch ${start}; its checkpoint says ${start - 1} are done`}`);

const emitted: Emission[] = [];
for (let batch = start; batch <= 3; batch++) {
  await storage.writeBatch(batch); // idempotent: overwrites batch N
  const event = box.commit((tx) => {
    // one SQLite transaction: the checkpoint and the event, or neither
    tx.set(progress, { batch });
    return tx.emit(batchReady, { partitionKey: `batch-${batch}`, extra: { rows: 1000 } });
  }); // durable here; the relay is woken at once and delivers in commit order
  emitted.push(event);
}
emitted.push(box.commit((tx) => tx.emit(batchReady, { partitionKey: 'done' })));

const receipts = Promise.allSettled(emitted.map((event) => event.receipt())); // each once the server has stored it
const left = await box.close(); // waits up to 10 s for delivery, then says what is left
for (const [index, receipt] of (await receipts).entries()) {
  const partition = emitted[index]!.partitionKey;
  // Refused for good (its code), or still pending in the file (why delivery failed).
  if (receipt.status === 'rejected') console.log(`${partition}: not published yet (${receipt.reason.rejection ?? left.lastError?.code ?? 'pending'})`);
  else if (receipt.value.duplicate) console.log(`${partition}: published before, as event ${receipt.value.eventId}; this retry added nothing`);
  else console.log(`${partition}: published as event ${receipt.value.eventId}`);
}
if (left.pending > 0 || left.dead > 0) {
  // Nothing is lost: pending rows stay in the file, and the next run (or `oncebox relay`) delivers them.
  console.error(`not done: ${left.summary}`);
  process.exitCode = 1;
}
