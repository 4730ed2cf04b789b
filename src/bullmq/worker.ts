import { Worker } from 'bullmq';
import { defaultLogger } from '../client/logger.js';
import { OptionsError } from '../protocol/errors.js';
import { JobRuns, type Handling, type OnceboxJobProcessor } from './job-run.js';
import { resolveWorkerOptions, type OnceboxWorkerOptions } from './options.js';

/**
 * A BullMQ worker whose every job is an oncebox run (the queue, and the job's id and creation time), with
 * the attempt that wins being the one that holds the job's BullMQ lock. Each hand-out takes its attempt
 * from a counter in the job's Redis hash, raised only while its lock token holds the lock, and claims it
 * exactly, so that a worker paused at the worst moment can never fence the one that took its job over.
 * The lock is checked again after the claim, before and after the terminal commit, and on a
 * FencedError; a worker that lost it lets the job go, committing and failing nothing. The processor's
 * return is the attempt's `box.complete()`, and its throw `box.fail(error, { willRetry })`, with
 * `willRetry` BullMQ's own rule on counters read under the lock; the end is delivered to the oncebox
 * server before BullMQ hears of it. A job BullMQ fails without running the processor is recorded by the
 * worker's `failed` listener. docs/runners.md has the whole of it, and what is not covered.
 */
export function onceboxWorker<R>(queue: string, processor: OnceboxJobProcessor<R>, options: OnceboxWorkerOptions): Worker {
  if (typeof queue !== 'string' || queue.length === 0) throw new OptionsError('queue', 'onceboxWorker: the queue name is required');
  if (typeof processor !== 'function') throw new OptionsError('processor', 'onceboxWorker: the processor must be a function (job, box, token) => Promise<result>');
  const resolved = resolveWorkerOptions(options);
  const logger = resolved.outbox?.logger ?? defaultLogger();
  const handled = new Map<string, Handling>();
  // Assigned right below; the processor runs only once the worker exists.
  let jobs: JobRuns<R>;
  const worker = new Worker(queue, (job, token) => jobs.process(job, token), resolved.worker);
  jobs = new JobRuns(worker, processor, resolved, logger, handled);
  worker.on('failed', (job) => {
    if (job?.token === undefined) return;
    const handling = handled.get(job.token);
    handled.delete(job.token);
    // Retried by BullMQ, or ended by the processor with its own failure for good: nothing to add.
    if (handling === 'ended' || typeof job.finishedOn !== 'number') return;
    void jobs.recordFailureWithoutProcessor(job);
  });
  worker.on('completed', (job) => {
    if (job.token !== undefined) handled.delete(job.token);
  });
  return worker;
}
