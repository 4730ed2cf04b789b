import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { DelayedError, RateLimitError, UnrecoverableError, WaitingChildrenError, WaitingError, Worker, type Job, type WorkerOptions } from 'bullmq';
import { failpoint } from '../outbox/failpoints.js';
import { openOutbox, type Outbox } from '../outbox/outbox.js';
import type { AttemptSource, OutboxOptions } from '../outbox/options.js';
import type { OutboxLogger } from '../outbox/relay-events.js';
import { defaultLogger } from '../outbox/reporter.js';
import { FencedError, OnceboxError, OptionsError } from '../protocol/errors.js';
import { jobEndCheckpoint, unheardEnd, type JobEnd } from './job-end.js';
import { JobLocks, type LockState } from './job-lock.js';

/** What `onceboxWorker` takes: where the jobs' outboxes go, the oncebox server, and BullMQ's own worker options. */
export interface OnceboxWorkerOptions {
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
   * emissions for the attempt that succeeds. `attemptsMade` is read from Redis while this worker still
   * holds the job's lock, so it is BullMQ's count as it is when BullMQ decides.
   * @defaultValue what BullMQ decides: false for an UnrecoverableError, else attemptsMade + 1 < opts.attempts
   */
  willRetry?: ((job: Job, error: unknown, state: LockState) => boolean) | undefined;
  /** How long a settled job's close waits for its rows to be delivered. @defaultValue 30000 */
  closeTimeoutMs?: number | undefined;
  /** Other outbox options (logger, relay tuning, durability, metrics). */
  outbox?: Omit<OutboxOptions, 'path' | 'server' | 'producer' | 'run' | 'token'> | undefined;
  /**
   * BullMQ's worker options: `connection` (required), `lockDuration`, `stalledInterval`,
   * `maxStalledCount`, `concurrency`, and the rest. docs/runners.md says which values to pick.
   */
  worker: WorkerOptions;
}

/**
 * Your processor, given the job, its outbox, and BullMQ's lock token of this hand-out (for
 * `job.moveToDelayed(timestamp, token)` and the like): commit each unit of work with `box.commit`.
 */
export type OnceboxJobProcessor<R> = (job: Job, box: Outbox, token: string) => Promise<R>;

/**
 * How far the processing of one hand-out got, for the `failed` listener: still running (or ended before
 * any terminal commit), or ended with a terminal commit that expects a retry, or one that does not.
 */
type Handling = 'running' | 'retrying' | 'ended';

/**
 * A BullMQ worker whose every job is an oncebox run: the workflow is the queue name, the run id the job
 * id, and the attempt is claimed from the server as a number that the worker takes from a counter in
 * the job's Redis hash, raised only while its lock token holds the job's lock. The attempt that wins is
 * the one that holds the lock:
 *
 * - a worker paused between the hand-out and its claim (its lock expired, the job handed to another
 *   worker) takes no number, or a lower one than its replacement's, which the server refuses once the
 *   replacement's claim is in: it stops without claiming, committing or failing the job;
 * - a worker that finds, after its claim, before its terminal commit or on a FencedError, that it no
 *   longer holds the lock stops the same way, quietly: BullMQ hears no failure from it;
 * - a worker that holds the lock and is fenced all the same (another claim of the run, outside this
 *   adapter) puts the job back to waiting, which costs the job none of its tries.
 *
 * The processor's return is the attempt's `box.complete()`, and its throw is `box.fail(error, { willRetry })`,
 * with `willRetry` read from Redis under the lock. A job BullMQ fails without calling the processor (it
 * stalled more often than `maxStalledCount`) gets its failure recorded by this worker's `failed` listener.
 */
export function onceboxWorker<R>(queue: string, processor: OnceboxJobProcessor<R>, options: OnceboxWorkerOptions): Worker {
  if (typeof processor !== 'function') throw new OptionsError('processor', 'onceboxWorker: the processor must be a function (job, box, token) => Promise<result>');
  if (options.worker?.connection === undefined) throw new OptionsError('worker.connection', 'onceboxWorker: worker.connection is required: the Redis connection BullMQ uses');
  const logger = options.outbox?.logger ?? defaultLogger();
  const handled = new Map<string, Handling>();
  // Assigned right below; the processor runs only once the worker exists.
  let jobs: JobRuns<R>;
  const worker = new Worker(queue, (job, token) => jobs.process(job, token), options.worker);
  jobs = new JobRuns(worker, processor, options, logger, handled);
  worker.on('failed', (job) => {
    if (job?.token === undefined) return;
    const handling = handled.get(job.token);
    handled.delete(job.token);
    // Retried by BullMQ, or ended by the processor with its own final failure: nothing to add. A final
    // failure the processor did not record (it threw before its outbox opened, or expected a retry that
    // BullMQ will not make) is recorded here.
    if (handling === 'ended' || typeof job.finishedOn !== 'number') return;
    void jobs.recordFailureWithoutProcessor(job);
  });
  worker.on('completed', (job) => {
    if (job.token !== undefined) handled.delete(job.token);
  });
  return worker;
}

/** Thrown by the attempt source when this hand-out's token no longer holds the job's lock. */
class LockLostError extends Error {}

/** The processing of each job a worker is handed. @internal */
class JobRuns<R> {
  private readonly locks: JobLocks;

  constructor(
    worker: Worker,
    private readonly processor: OnceboxJobProcessor<R>,
    private readonly options: OnceboxWorkerOptions,
    private readonly logger: OutboxLogger,
    private readonly handled: Map<string, Handling>,
  ) {
    this.locks = new JobLocks(worker);
  }

  /**
   * One hand-out of a job: claim its attempt under the lock, run the processor, make the terminal commit,
   * and check the lock again at each step where another worker may have been handed the job meanwhile.
   */
  async process(job: Job, token: string | undefined): Promise<R> {
    if (job.id === undefined) throw new OptionsError('job.id', 'onceboxWorker: the job has no id; BullMQ gives every job one');
    if (token === undefined) throw new OptionsError('token', 'onceboxWorker: BullMQ passed no lock token; the adapter needs BullMQ 5 or later');
    this.handled.set(token, 'running');
    failpoint('bullmq:before-claim');
    let box: Outbox;
    try {
      box = await this.open(job, { next: async (floor) => this.takeAttempt(job, token, floor) });
    } catch (error) {
      if (error instanceof LockLostError) throw this.letGo(token);
      if (error instanceof FencedError) throw await this.afterFence(job, token);
      throw error;
    }
    failpoint('bullmq:after-claim');
    if ((await this.locks.held(job, token)) === undefined) return this.stop(box, token);
    const unheard = unheardEnd(box, job.stalledCounter);
    if (unheard !== undefined) return this.endAgain(job, token, box, unheard);
    let result: R;
    try {
      result = await this.processor(job, box, token);
    } catch (error) {
      return this.failed(job, token, box, error);
    }
    failpoint('bullmq:before-complete');
    const state = await this.locks.held(job, token);
    if (state === undefined) return this.stop(box, token);
    let completed;
    try {
      completed = box.complete((tx) => tx.set(jobEndCheckpoint(box), { outcome: 'succeeded', attempt: box.run!.attempt, stalls: state.stalls }));
    } catch (error) {
      await box.close({ timeoutMs: 0 });
      if (error instanceof FencedError) throw await this.afterFence(job, token);
      throw error;
    }
    this.handled.set(token, 'ended');
    // Settled (delivered or refused) by the time the close below has waited for the rows.
    const success = completed.event?.receipt().then(
      () => undefined,
      (refusal: unknown) => refusal,
    );
    await this.settle(box, job, true);
    failpoint('bullmq:after-terminal');
    // The lock was lost between the check and the delivery, and the replacement's claim fenced this
    // success; or it was lost while the rows went out, and the next hand-out finds the end unheard.
    if ((await success) instanceof FencedError || (await this.locks.held(job, token)) === undefined) throw this.letGo(token);
    return result;
  }

  /** The processor threw: a failure of the attempt, unless the job has moved on or its lock is lost. */
  private async failed(job: Job, token: string, box: Outbox, error: unknown): Promise<never> {
    if (isBullmqMove(error)) {
      // The processor moved the job itself (delayed, waiting, waiting for children, rate limited): no
      // failure, and the next hand-out resumes from the checkpoint under a new attempt.
      await box.close({ timeoutMs: this.options.closeTimeoutMs ?? 30_000 });
      this.handled.delete(token);
      throw error;
    }
    if (error instanceof FencedError) {
      await box.close({ timeoutMs: 0 });
      throw await this.afterFence(job, token);
    }
    const state = await this.locks.held(job, token);
    if (state === undefined) return this.stop(box, token);
    const willRetry = (this.options.willRetry ?? bullmqWillRetry)(job, error, state);
    try {
      const end = jobEndCheckpoint(box);
      box.fail(error, willRetry ? undefined : (tx) => tx.set(end, { outcome: 'failed', attempt: box.run!.attempt, stalls: state.stalls }), { willRetry });
    } catch (failError) {
      await box.close({ timeoutMs: 0 });
      if (failError instanceof FencedError) throw await this.afterFence(job, token);
      throw failError;
    }
    this.handled.set(token, willRetry ? 'retrying' : 'ended');
    await this.settle(box, job, !willRetry);
    failpoint('bullmq:after-terminal');
    // Lost while the rows went out: BullMQ would refuse this worker's move, and the next hand-out resumes
    // (or, after a failure for good, finds the end unheard).
    if ((await this.locks.held(job, token)) === undefined) throw this.letGo(token);
    throw error;
  }

  /**
   * An earlier hand-out ended the run, and BullMQ never heard of it (that worker died, or lost the job's
   * lock, between oncebox's terminal commit and BullMQ's): end the job the same way, without running the
   * processor again. A success completes it with no return value; a failure fails it for good. The record
   * takes this hand-out's stall count, so that a `job.retry()` after this end runs the job as a new try.
   */
  private async endAgain(job: Job, token: string, box: Outbox, end: JobEnd): Promise<R> {
    this.handled.set(token, 'ended');
    box.commit((tx) => tx.set(jobEndCheckpoint(box), { ...end, stalls: job.stalledCounter }));
    await this.settle(box, job, true);
    if (end.outcome === 'failed') {
      throw new UnrecoverableError(`oncebox: attempt ${end.attempt} of run ${job.id} failed it for good; its worker stopped before BullMQ recorded that`);
    }
    return undefined as R;
  }

  /**
   * BullMQ failed the job without running the processor (it stalled more often than maxStalledCount, or
   * started more often than maxStartedAttempts), or after a processor that ended before any terminal
   * commit: the run's failure is recorded here, final, with its held emissions discarded. No worker holds
   * the job now, so the attempt is taken without the lock; it is still above every hand-out's, and
   * fences them all.
   */
  async recordFailureWithoutProcessor(job: Job): Promise<void> {
    try {
      const box = await this.open(job, {
        next: async (floor) => {
          const attempt = await this.locks.takeAttemptUnlocked(job, floor);
          if (attempt === undefined) throw new LockLostError(`job ${job.id} is gone from Redis`);
          return attempt;
        },
      });
      // An earlier hand-out may have ended the run already: BullMQ's failure then adds nothing.
      if (jobEndCheckpoint(box).get() === undefined) {
        const end = jobEndCheckpoint(box);
        const reason = new UnrecoverableError(job.failedReason || 'failed by BullMQ without running the processor');
        box.fail(reason, (tx) => tx.set(end, { outcome: 'failed', attempt: box.run!.attempt, stalls: job.stalledCounter }), { willRetry: false });
      }
      await this.settle(box, job, true);
    } catch (error) {
      if (error instanceof LockLostError) return;
      this.logger.error(
        { code: error instanceof OnceboxError ? error.code : 'bullmq_failure_unrecorded', queue: job.queueName, job: job.id, err: error },
        `oncebox: BullMQ failed job ${job.id} of ${job.queueName} for good, and its failure could not be recorded: ` +
          `${(error as Error).message}. Its held emissions stay held until the run is retried or ended`,
      );
    }
  }

  private open(job: Job, attempt: AttemptSource): Promise<Outbox> {
    const { options } = this;
    return openOutbox({
      ...options.outbox,
      path: this.pathOf(job),
      server: options.server,
      token: options.token,
      producer: options.producer ?? job.queueName,
      run: { workflow: job.queueName, runId: job.id!, task: options.task, attempt },
      // A stalled worker's job taken over, or a worker killed mid-job: the notifiers' onFenced hears of it.
      noteFenced: true,
    });
  }

  private async takeAttempt(job: Job, token: string, floor: number): Promise<number> {
    const attempt = await this.locks.takeAttempt(job, token, floor);
    if (attempt === undefined) throw new LockLostError(`the lock on job ${job.id} is no longer this worker's`);
    return attempt;
  }

  /** This hand-out is over without a word to BullMQ: another worker holds the job now. */
  private async stop(box: Outbox, token: string): Promise<never> {
    await box.close({ timeoutMs: 0 });
    throw this.letGo(token);
  }

  /**
   * A WaitingError makes BullMQ fetch the next job without touching this one: no failure counted, and no
   * "Missing lock" error from a move the lock would refuse.
   */
  private letGo(token: string): WaitingError {
    this.handled.delete(token);
    return new WaitingError();
  }

  /** Fenced: quiet when the lock is lost; when it is held, the job goes back to waiting, costing none of its tries. */
  private async afterFence(job: Job, token: string): Promise<WaitingError> {
    if ((await this.locks.held(job, token)) !== undefined) await job.moveToWait(token);
    return this.letGo(token);
  }

  /** Closes the job's outbox, and removes its file once nothing in it is left to deliver and no retry will open it. */
  private async settle(box: Outbox, job: Job, done: boolean): Promise<void> {
    const closed = await box.close({ timeoutMs: this.options.closeTimeoutMs ?? 30_000 });
    if (!done || closed.pending > 0 || closed.dead > 0) return;
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${this.pathOf(job)}${suffix}`, { force: true });
  }

  private pathOf(job: Job): string {
    return join(this.options.dir, fileSafe(job.queueName), `${fileSafe(job.id!)}.db`);
  }
}

/** BullMQ's own decision, as `moveToFailed` makes it: no retry after an UnrecoverableError or the last try. */
export function bullmqWillRetry(job: Job, error: unknown, state: LockState): boolean {
  if (error instanceof UnrecoverableError || (error as Error | null)?.name === 'UnrecoverableError') return false;
  // job.discard(), deprecated but still honoured by BullMQ; the field is not in its public type.
  if ((job as unknown as { discarded?: boolean }).discarded === true) return false;
  return state.attemptsMade + 1 < (job.opts.attempts ?? 1);
}

/** The errors a processor throws to move its job itself, which BullMQ does not count as failures. */
function isBullmqMove(error: unknown): boolean {
  if (error instanceof DelayedError || error instanceof WaitingError || error instanceof WaitingChildrenError || error instanceof RateLimitError) return true;
  const name = (error as Error | null)?.name;
  return name === 'DelayedError' || name === 'WaitingError' || name === 'WaitingChildrenError' || name === 'RateLimitError';
}

/** A queue name or job id as a file name: anything but letters, digits, `.`, `_` and `-` percent-encoded. */
function fileSafe(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}
