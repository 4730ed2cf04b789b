// CORRECT: idempotent data write, checkpoint + event in one commit, resume from the checkpoint.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { open, DATA, BATCHES, z, FencedError } from './open.js';

const box = await open();
const ready = box.asset('batch_ready');
const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
try {
  for (let batch = (progress.get()?.batch ?? 0) + 1; batch <= BATCHES; batch++) {
    const rows = 10 * batch;
    writeFileSync(join(DATA(), `batch-${batch}.csv`), `${'row\n'.repeat(rows)}`); // replaced whole
    box.commit((tx) => {
      tx.set(progress, { batch });
      tx.emit(ready, { partitionKey: `batch-${batch}`, extra: { rows } });
    });
  }
  box.complete();
} catch (error) {
  if (!(error instanceof FencedError)) throw error;
  await box.close({ timeoutMs: 0 });
  process.exit(3);
}
const left = await box.close();
if (left.pending > 0 || left.dead > 0) { console.error(`not done: ${left.summary}`); process.exitCode = 1; }
