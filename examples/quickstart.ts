// The README's quickstart, kept as a file so that it is type-checked and run by the tests.
import { z } from 'zod';
import { openOutbox } from '../src/outbox/index.js';

const server = process.env.ONCEBOX_SERVER ?? 'http://127.0.0.1:8787';
const token = process.env.ONCEBOX_TOKEN; // the job's token, from the environment, never from the code
const storage = { writeBatch: async (batch: number) => void batch }; // your idempotent data write

const box = await openOutbox({
  path: process.env.ONCEBOX_OUTBOX ?? '.oncebox/orders-ingest.db',
  server,
  token,
  producer: 'orders-ingest',
  run: { workflow: 'orders', runId: '2026-11-30', task: 'ingest', attempt: 1 },
});
box.on('delivered', (rows) => rows.forEach((row) => console.log(`stored ${row.key} as event ${row.eventId}`)));
const batchReady = box.asset('batch_ready');
const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));

for (let batch = (progress.get()?.batch ?? 0) + 1; batch <= 3; batch++) {
  await storage.writeBatch(batch); // idempotent: overwrites batch N
  box.commit((tx) => {
    // one SQLite transaction: the checkpoint and the event, or neither
    tx.set(progress, { batch });
    tx.emit(batchReady, { partitionKey: `batch-${batch}`, extra: { rows: 1000 } });
  }); // durable here; the relay is woken at once and delivers in commit order
}

box.commit((tx) => tx.emit(batchReady, { partitionKey: 'done' }));

const { pending, dead, lastError } = await box.close(); // waits up to 10 s for delivery, then says what is left
if (pending > 0 || dead > 0) {
  // Nothing is lost: pending rows stay in the file, and the next run (or `oncebox relay`) delivers them.
  console.error(`not delivered yet: ${pending} pending, ${dead} dead; last error: ${lastError?.message ?? 'none'}`);
  process.exitCode = 1;
}
