import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Job } from 'bullmq';
import { openOutbox, type Outbox } from '../outbox/outbox.js';
import type { OutboxOptions } from '../outbox/options.js';
import { FencedError, OptionsError } from '../protocol/errors.js';

/** What `onceboxProcessor` takes. */
export interface OnceboxProcessorOptions {
  /** Where each job's outbox file goes: DIR/QUEUE/JOB_ID.db, removed once the job is settled and its rows delivered. */
  dir: string;
  /** The oncebox server, or several instances over one PostgreSQL database. */
  server: string | string[];
  /** The producer name of the jobs' emissions. @defaultValue the queue name */
  producer?: string | undefined;
  /** A publish token of the producer. */
  token?: string | undefined;
  /** The task of the run context, when one queue runs several steps of a workflow. */
  task?: string | undefined;
  /**
   * Whether BullMQ will try the job again after this failure: the failure then keeps the job's held
   * emissions for the attempt that succeeds. @defaultValue attemptsMade + 1 < opts.attempts
   */
  willRetry?: ((job: Job, error: unknown) => boolean) | undefined;
  /** How long a settled job's close waits for its rows to be delivered. @defaultValue 30000 */
  closeTimeoutMs?: number | undefined;
  /** Other outbox options (logger, relay tuning, durability, metrics). */
  outbox?: Omit<OutboxOptions, 'path' | 'server' | 'producer' | 'run' | 'token'> | undefined;
}

/** Your processor, given the job and its outbox: commit each unit of work with `box.commit`. */
export type OnceboxJobProcessor<R> = (job: Job, box: Outbox) => Promise<R>;

/**
 * Wraps a BullMQ processor so that each job is an oncebox run: the run identity is the queue name and the
 * job id, and the attempt is claimed from the server, never taken from `attemptsMade` (a stalled job's
 * replacement runs with the same count, and `job.retry()` resets it). The claim fences every earlier
 * attempt, so a stalled worker that wakes up commits nothing more: its next commit throws FencedError.
 * The processor's return is the attempt's `box.complete()`, and its throw is `box.fail(error)`.
 */
export function onceboxProcessor<R>(processor: OnceboxJobProcessor<R>, options: OnceboxProcessorOptions): (job: Job) => Promise<R> {
  return async (job) => {
    if (job.id === undefined) throw new OptionsError('job.id', 'onceboxProcessor: the job has no id; BullMQ gives every job one');
    const path = join(options.dir, fileSafe(job.queueName), `${fileSafe(job.id)}.db`);
    const box = await openOutbox({
      ...options.outbox,
      path,
      server: options.server,
      token: options.token,
      producer: options.producer ?? job.queueName,
      run: { workflow: job.queueName, runId: job.id, task: options.task, attempt: 'claim' },
      // A stalled worker's job taken over, or a worker killed mid-job: the notifiers' onFenced hears of it.
      noteFenced: true,
    });
    let result: R;
    try {
      result = await processor(job, box);
    } catch (error) {
      if (error instanceof FencedError) {
        // A later attempt owns the job now: this one records nothing and lets go.
        await box.close({ timeoutMs: 0 });
        throw error;
      }
      const willRetry = (options.willRetry ?? defaultWillRetry)(job, error);
      try {
        box.fail(error, undefined, { willRetry });
      } catch (failError) {
        await box.close({ timeoutMs: 0 });
        throw failError instanceof FencedError ? failError : error;
      }
      await settle(box, path, options, !willRetry);
      throw error;
    }
    try {
      box.complete();
    } catch (error) {
      await box.close({ timeoutMs: 0 });
      throw error;
    }
    await settle(box, path, options, true);
    return result;
  };
}

function defaultWillRetry(job: Job): boolean {
  return job.attemptsMade + 1 < (job.opts.attempts ?? 1);
}

/** Closes the job's outbox, and removes its file once nothing in it is left to deliver and no retry will open it. */
async function settle(box: Outbox, path: string, options: OnceboxProcessorOptions, done: boolean): Promise<void> {
  const closed = await box.close({ timeoutMs: options.closeTimeoutMs ?? 30_000 });
  if (!done || closed.pending > 0 || closed.dead > 0) return;
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
}

/** A queue name or job id as a file name: anything but letters, digits, `.`, `_` and `-` percent-encoded. */
function fileSafe(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}
