/**
 * A BullMQ worker that runs the batch loop as an oncebox run: the job's queue and id are the run, the
 * attempt is claimed under the job's BullMQ lock, each batch commits its checkpoint and its
 * "batch_ready" event together, and a "run_done" event is held until the job succeeds. A worker whose
 * job was taken over while it stalled stops without committing more, and without failing the job.
 *
 *   tsx examples/bullmq-ingest.ts --queue NAME --server URL --dir DIR [--lock-ms 30000]
 *     [--batch-ms 20] [--block-after-batch K --block-ms MS] [--jobs N]
 *
 * The job data is { batches: number }. --block-* busy-waits the worker's event loop after batch K (a
 * long GC pause, a CPU-bound step), long enough for BullMQ to take the job for stalled.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { FencedError, onceboxWorker } from '../src/bullmq/index.js';

const { values: args } = parseArgs({
  options: {
    queue: { type: 'string' },
    server: { type: 'string' },
    dir: { type: 'string' },
    redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
    'lock-ms': { type: 'string', default: '30000' },
    'batch-ms': { type: 'string', default: '20' },
    'block-after-batch': { type: 'string' },
    'block-ms': { type: 'string', default: '0' },
    /** Exit after this many jobs have ended (done or failed) here. */
    jobs: { type: 'string', default: '1' },
  },
  strict: true,
});
if (!args.queue || !args.server || !args.dir) {
  console.error('usage: bullmq-ingest --queue NAME --server URL --dir DIR');
  process.exit(2);
}
const log = (line: Record<string, unknown>) => console.log(JSON.stringify(line));
const redis = new URL(args.redis!);
const lockMs = Number(args['lock-ms']);

const worker = onceboxWorker(
  args.queue,
  async (job, box) => {
    const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
    const total = (job.data as { batches: number }).batches;
    const from = progress.get()?.batch ?? 0;
    log({ event: 'start', job: job.id, attempt: box.run?.attempt, resumeFrom: from });
    for (let batch = from + 1; batch <= total; batch++) {
      try {
        box.commit((tx) => {
          tx.set(progress, { batch });
          tx.emit(box.asset('batch_ready'), { partitionKey: `${job.id}/batch-${batch}` });
          tx.emit(box.asset('run_done'), { partitionKey: `${job.id}/batch-${batch}`, on: 'success' });
        });
      } catch (error) {
        // A stalled worker whose job another worker took: this attempt is over (the adapter lets it go).
        if (error instanceof FencedError) log({ event: 'fenced', job: job.id, batch, attempt: box.run?.attempt });
        throw error;
      }
      log({ event: 'committed', job: job.id, batch, attempt: box.run?.attempt });
      if (Number(args['block-after-batch']) === batch) {
        const until = Date.now() + Number(args['block-ms']);
        while (Date.now() < until) {
          // Busy: the event loop renews no lock meanwhile.
        }
      }
      await new Promise((resolve) => setTimeout(resolve, Number(args['batch-ms'])));
    }
    return { batches: total };
  },
  {
    dir: args.dir,
    server: args.server,
    producer: 'bullmq-ingest',
    token: process.env.ONCEBOX_TOKEN,
    worker: { connection: { host: redis.hostname, port: Number(redis.port) }, lockDuration: lockMs, stalledInterval: lockMs },
  },
);

let ended = 0;
const finish = async () => {
  if (++ended < Number(args.jobs)) return;
  await worker.close(true);
  process.exit(0);
};
worker.on('completed', (job) => {
  log({ event: 'done', job: job.id });
  void finish();
});
worker.on('failed', (job, error) => {
  log({ event: 'failed', job: job?.id, message: error.message });
  void finish();
});
worker.on('error', (error) => log({ event: 'worker-error', message: error.message }));
await worker.waitUntilReady();
log({ event: 'ready', queue: args.queue });
