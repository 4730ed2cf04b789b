/**
 * A BullMQ worker process for the adapter's randomized tests: the batch loop of examples/bullmq-ingest.ts,
 * plus planned mischief read from the job's data, keyed by BullMQ's hand-out number of the job
 * (`attemptsStarted`), so that each hand-out misbehaves the same way whichever process it lands in:
 *
 *   data: { batches, batchMs, chaos: { "<hand-out>": { stallAtStartMs?, stallAfter?, stallMs?,
 *           stallAtEndMs?, killAfter?, throwAfter? } } }
 *
 * `stallAfter`, `killAfter` and `throwAfter` count the batches this hand-out commits (0: before the
 * first); a hand-out that resumes with fewer batches left does it once it has committed them all.
 *
 * Stalls before the claim come from ONCEBOX_FAILPOINT (bullmq:before-claim@N:stall=MS), per process.
 *
 *   tsx test/support/bullmq-chaos-worker.ts --queue NAME --server URL --dir DIR --lock-ms MS
 *     [--max-stalled N] [--concurrency N] [--producer NAME --ready ASSET --done ASSET]
 *
 * The token is ONCEBOX_TOKEN's, as a job's is.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { onceboxWorker } from '../../src/bullmq/index.js';
import type { Mischief } from './bullmq-mischief.js';

const { values: args } = parseArgs({
  options: {
    queue: { type: 'string' },
    server: { type: 'string' },
    dir: { type: 'string' },
    'lock-ms': { type: 'string', default: '1000' },
    'max-stalled': { type: 'string', default: '100' },
    concurrency: { type: 'string', default: '1' },
    redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
    producer: { type: 'string', default: 'bullmq-ingest' },
    ready: { type: 'string', default: 'batch_ready' },
    done: { type: 'string', default: 'run_done' },
  },
  strict: true,
});
const log = (line: Record<string, unknown>) => console.log(JSON.stringify({ pid: process.pid, ms: Date.now() % 100000, ...line }));
const busy = (ms: number | undefined) => {
  const until = Date.now() + (ms ?? 0);
  while (Date.now() < until) {
    // The event loop serves nothing: no lock renewal, no timer, no socket.
  }
};
const lockMs = Number(args['lock-ms']);

const worker = onceboxWorker(
  args.queue!,
  async (job, box) => {
    const data = job.data as { batches: number; batchMs?: number; chaos?: Record<string, Mischief> };
    const mischief = data.chaos?.[String(job.attemptsStarted)] ?? {};
    const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
    const from = progress.get()?.batch ?? 0;
    log({ event: 'start', job: job.id, handout: job.attemptsStarted, attempt: box.run?.attempt, resumeFrom: from, held: box.status().held, dir: args.dir });
    busy(mischief.stallAtStartMs);
    const left = data.batches - from;
    // The planned mischief after `committed` batches of this hand-out, or at its end when fewer are left.
    const act = (committed: number) => {
      const due = (after: number | undefined) => after !== undefined && (committed === after || (committed === left && after > left));
      if (due(mischief.killAfter)) process.kill(process.pid, 'SIGKILL');
      if (due(mischief.stallAfter)) busy(mischief.stallMs);
      if (due(mischief.throwAfter)) throw new Error(`planned failure of hand-out ${job.attemptsStarted} after ${committed} batches`);
    };
    act(0);
    for (let batch = from + 1; batch <= data.batches; batch++) {
      box.commit((tx) => {
        tx.set(progress, { batch });
        tx.emit(box.asset(args.ready!), { partitionKey: `${job.id}/batch-${batch}` });
        tx.emit(box.asset(args.done!), { partitionKey: `${job.id}/batch-${batch}`, on: 'success' });
      });
      log({ event: 'committed', job: job.id, batch, attempt: box.run?.attempt });
      act(batch - from);
      await new Promise((resolve) => setTimeout(resolve, data.batchMs ?? 20));
    }
    busy(mischief.stallAtEndMs);
    return { batches: data.batches };
  },
  {
    dir: args.dir!,
    server: args.server!,
    producer: args.producer!,
    closeTimeoutMs: 10_000,
    worker: {
      connection: { host: new URL(args.redis!).hostname, port: Number(new URL(args.redis!).port || 6379) },
      lockDuration: lockMs,
      stalledInterval: lockMs,
      maxStalledCount: Number(args['max-stalled']),
      concurrency: Number(args.concurrency),
    },
  },
);
worker.on('completed', (job) => log({ event: 'done', job: job.id }));
worker.on('failed', (job, error) => log({ event: 'failed', job: job?.id, message: error.message }));
worker.on('error', (error) => log({ event: 'worker-error', message: error.message }));
await worker.waitUntilReady();
log({ event: 'ready' });
