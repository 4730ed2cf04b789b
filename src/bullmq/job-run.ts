import { rmSync } from 'node:fs';
import { UnrecoverableError, WaitingError, type Job, type Worker } from 'bullmq';
import { failpoint } from '../failpoints/failpoints.js';
import type { Outbox } from '../outbox/outbox.js';
import { openOutbox } from '../outbox/open.js';
import type { AttemptSource } from '../outbox/options.js';
import type { OutboxLogger } from '../client/logger.js';
import { FencedError, OnceboxError, OptionsError } from '../protocol/errors.js';
import { jobIdentity, type JobIdentity } from './job-identity.js';
import { JobLocks, type LockState } from './job-lock.js';
import { jobRecord, readJobHistory, type JobEnd } from './job-record.js';
import type { ResolvedWorkerOptions } from './options.js';
import { assertStorable, bullmqWillRetry, isBullmqMove } from './outcome.js';

/** Your processor, given the job, its outbox, and BullMQ's lock token of this hand-out. */
export type OnceboxJobProcessor<R> = (job: Job, box: Outbox, token: string) => Promise<R>;

/**
 * How far the processing of one hand-out got, for the worker's `failed` listener: still running (or
 * ended before any terminal commit), ended with a failure that expects a retry, or ended for good.
 * @internal
 */
export type Handling = 'running' | 'retrying' | 'ended';

/** Thrown by the attempt source when this hand-out's token no longer holds the job's lock. */
class LockLostError extends Error {}

/** How often a settled job looks whether the server has taken its last rows. */
const DELIVERY_POLL_MS = 100;

/**
 * The processing of each job a worker is handed, as docs/runners.md describes it: the attempt claimed
 * under the lock, the lock checked again wherever another worker may have been handed the job since,
 * and the run's end delivered to the server before BullMQ hears of it.
 * @internal
 */
export class JobRuns<R> {
  private readonly locks: JobLocks;
  /** Causes already logged, so that each is logged once. */
  private readonly logged = new Set<string>();

  constructor(
    private readonly worker: Worker,
    private readonly processor: OnceboxJobProcessor<R>,
    private readonly options: ResolvedWorkerOptions,
    private readonly logger: OutboxLogger,
    private readonly handled: Map<string, Handling>,
  ) {
    this.locks = new JobLocks(worker);
  }

  /** One hand-out of a job. Its outbox is closed on every way out. */
  async process(job: Job, token: string | undefined): Promise<R> {
    if (job.id === undefined) throw new OptionsError('job.id', 'onceboxWorker: the job has no id; BullMQ gives every job one');
    if (token === undefined) throw new OptionsError('token', 'onceboxWorker: BullMQ passed no lock token; the adapter needs BullMQ 5 or later');
    this.handled.set(token, 'running');
    let identity: JobIdentity;
    try {
      identity = this.identityOf(job);
    } catch (error) {
      // A job that can never be a run: it fails for good, with nothing to record.
      this.handled.set(token, 'ended');
      throw error;
    }
    failpoint('bullmq:before-claim');
    let box: Outbox;
    try {
      box = await this.open(job, identity, { next: async (floor) => this.takeAttempt(job, token, floor) });
    } catch (error) {
      if (error instanceof LockLostError) throw this.letGo(token);
      if (error instanceof FencedError) throw await this.afterFence(job, token);
      throw error;
    }
    try {
      return await this.run(job, token, box, identity);
    } finally {
      await box.close({ timeoutMs: 0 });
    }
  }

  private async run(job: Job, token: string, box: Outbox, identity: JobIdentity): Promise<R> {
    failpoint('bullmq:after-claim');
    if ((await this.locks.held(job, token)) === undefined) throw this.letGo(token);
    const history = readJobHistory(box, job.stalledCounter);
    if (history.unheardEnd !== undefined) return this.endAgain(job, token, box, identity, history.unheardEnd);
    // The last hand-out's worker stalled or died mid-run: its attempt is on record as fenced.
    if (history.stalledSince) box.noteFencedPredecessor();
    box.commit((tx) => tx.set(jobRecord(box), { stalls: job.stalledCounter, end: null }));
    let result: R;
    try {
      result = await this.processor(job, box, token);
      assertStorable(result);
    } catch (error) {
      return this.failed(job, token, box, identity, error);
    }
    failpoint('bullmq:before-complete');
    const state = await this.locks.held(job, token);
    if (state === undefined) throw this.letGo(token);
    let completed;
    try {
      completed = box.complete((tx) => tx.set(jobRecord(box), { stalls: state.stalls, end: { outcome: 'succeeded', attempt: box.run!.attempt } }));
    } catch (error) {
      if (error instanceof FencedError) throw await this.afterFence(job, token);
      throw error;
    }
    this.handled.set(token, 'ended');
    // Settled (delivered or refused) by the time the rows are delivered.
    const success = completed.event?.receipt().then(
      () => undefined,
      (refusal: unknown) => refusal,
    );
    if (!(await this.deliver(box, job))) throw this.letGo(token);
    failpoint('bullmq:after-terminal');
    // The lock was lost between the check and the delivery, and the replacement's claim fenced this
    // success; or it was lost while the rows went out, and the next hand-out finds the end unheard.
    // (Delivered by now, the receipt has settled: looked at, not waited for.)
    const refusal = await Promise.race([success, Promise.resolve(undefined)]);
    if (refusal instanceof FencedError || (await this.locks.held(job, token)) === undefined) throw this.letGo(token);
    await this.settle(box, identity, true);
    return result;
  }

  /** The processor threw: a failure of the attempt, unless the job has moved on or its lock is lost. */
  private async failed(job: Job, token: string, box: Outbox, identity: JobIdentity, error: unknown): Promise<never> {
    if (isBullmqMove(error)) {
      // The processor moved the job itself (delayed, waiting, waiting for children, rate limited): no
      // failure, and the next hand-out resumes from the checkpoint under a new attempt.
      await box.close({ timeoutMs: this.options.closeTimeoutMs });
      this.handled.delete(token);
      throw error;
    }
    if (error instanceof FencedError) throw await this.afterFence(job, token);
    const state = await this.locks.held(job, token);
    if (state === undefined) throw this.letGo(token);
    const willRetry = this.willRetry(job, error, state);
    const end: JobEnd | null = willRetry ? null : { outcome: 'failed', attempt: box.run!.attempt };
    try {
      box.fail(error, (tx) => tx.set(jobRecord(box), { stalls: state.stalls, end }), { willRetry });
    } catch (failError) {
      if (failError instanceof FencedError) throw await this.afterFence(job, token);
      throw failError;
    }
    this.handled.set(token, willRetry ? 'retrying' : 'ended');
    if (!(await this.deliver(box, job))) throw this.letGo(token);
    failpoint('bullmq:after-terminal');
    // Lost while the rows went out: BullMQ would refuse this worker's move, and the next hand-out resumes
    // (or, after a failure for good, finds the end unheard).
    if ((await this.locks.held(job, token)) === undefined) throw this.letGo(token);
    await this.settle(box, identity, !willRetry);
    throw error;
  }

  /**
   * An earlier hand-out ended the run, and BullMQ never heard of it (that worker died, or lost the job's
   * lock, between oncebox's terminal commit and BullMQ's): end the job the same way, without running the
   * processor again. A success completes it with no return value; a failure fails it for good. The record
   * takes this hand-out's stall count, so that a `job.retry()` after this end runs the job as a new try.
   */
  private async endAgain(job: Job, token: string, box: Outbox, identity: JobIdentity, end: JobEnd): Promise<R> {
    this.handled.set(token, 'ended');
    box.commit((tx) => tx.set(jobRecord(box), { stalls: job.stalledCounter, end }));
    if (!(await this.deliver(box, job))) throw this.letGo(token);
    await this.settle(box, identity, true);
    if (end.outcome === 'failed') {
      throw new UnrecoverableError(`oncebox: attempt ${end.attempt} of run ${identity.runId} failed it for good; its worker stopped before BullMQ recorded that`);
    }
    return undefined as R;
  }

  /**
   * BullMQ failed the job for good without a failure on oncebox's record: it did not run the processor
   * (the job stalled more often than maxStalledCount, or started more often than maxStartedAttempts), or
   * the processor ended before any terminal commit, or expected a retry BullMQ will not make. No worker
   * holds the job now, so the attempt is taken without the lock; it is still above every hand-out's,
   * and fences them all. A run that had already succeeded (its worker died after the success, and then
   * the job stalled once too often) is not failed: the job is put back, and its next hand-out completes it.
   */
  async recordFailureWithoutProcessor(job: Job): Promise<void> {
    let identity: JobIdentity;
    try {
      identity = this.identityOf(job);
    } catch {
      return;
    }
    try {
      const box = await this.open(job, identity, {
        next: async (floor) => {
          const attempt = await this.locks.takeAttemptUnlocked(job, floor);
          if (attempt === undefined) throw new LockLostError(`job ${job.id} is gone from Redis`);
          return attempt;
        },
      });
      try {
        const record = jobRecord(box).get();
        if (record?.end?.outcome === 'succeeded') {
          await box.close({ timeoutMs: this.options.closeTimeoutMs });
          await job.retry('failed');
          return;
        }
        if (!record?.end) {
          const reason = new UnrecoverableError(job.failedReason || 'failed by BullMQ without running the processor');
          box.fail(reason, (tx) => tx.set(jobRecord(box), { stalls: job.stalledCounter, end: { outcome: 'failed', attempt: box.run!.attempt } }), { willRetry: false });
        }
        await this.deliver(box, job);
        await this.settle(box, identity, true);
      } finally {
        await box.close({ timeoutMs: 0 });
      }
    } catch (error) {
      if (error instanceof LockLostError) return;
      this.logOnce(
        'error',
        `unrecorded:${job.id}`,
        { code: error instanceof OnceboxError ? error.code : 'bullmq_failure_unrecorded', queue: job.queueName, job: job.id, err: error },
        `oncebox: BullMQ failed job ${job.id} of ${job.queueName} for good, and oncebox could not record it: ${(error as Error).message}. ` +
          'Its held emissions stay held until the job is retried',
      );
    }
  }

  private identityOf(job: Job): JobIdentity {
    return jobIdentity(job, this.options.dir, this.worker.opts.prefix);
  }

  private open(job: Job, identity: JobIdentity, attempt: AttemptSource): Promise<Outbox> {
    const { options } = this;
    return openOutbox({
      ...options.outbox,
      path: identity.path,
      server: options.server,
      token: options.token,
      producer: options.producer ?? job.queueName,
      run: { workflow: identity.workflow, runId: identity.runId, task: options.task, attempt },
      // A hand-out may land on a machine whose file of the job an earlier hand-out left, while another
      // machine has taken the run further since (and perhaps ended it, unheard by BullMQ): the server's
      // state is then the job's, not the file's.
      resume: 'server-newer',
    });
  }

  private async takeAttempt(job: Job, token: string, floor: number): Promise<number> {
    const attempt = await this.locks.takeAttempt(job, token, floor);
    if (attempt === undefined) throw new LockLostError(`the lock on job ${job.id} is no longer this worker's`);
    return attempt;
  }

  /** `willRetry` as the options say, or BullMQ's rule when theirs throws or answers something else. */
  private willRetry(job: Job, error: unknown, state: LockState): boolean {
    const own = this.options.willRetry;
    if (own === undefined) return bullmqWillRetry(job, error, state);
    try {
      const answer: unknown = own(job, error, state);
      if (typeof answer === 'boolean') return answer;
      throw new TypeError(`it answered ${typeof answer}, not true or false`);
    } catch (problem) {
      this.logOnce(
        'error',
        'willRetry',
        { code: 'invalid_option', field: 'willRetry', err: problem },
        `oncebox: the willRetry option failed (${(problem as Error).message}); BullMQ's own rule decides instead. Fix the option`,
      );
      return bullmqWillRetry(job, error, state);
    }
  }

  /**
   * Waits until the server has taken the outbox's rows (or refused them for good), so that BullMQ hears
   * of an end only once oncebox has it. While the server is down it waits on, holding the job (BullMQ
   * renews the lock), and says so once the close timeout is over; a worker that closes meanwhile gives
   * up, and the job is taken back as stalled and ended by its next hand-out.
   * @returns false when the worker closed first.
   */
  private async deliver(box: Outbox, job: Job): Promise<boolean> {
    const started = Date.now();
    for (;;) {
      const status = box.status();
      if (status.pending + status.pendingCheckpoints === 0 || status.dead > 0) return true;
      if (this.worker.closing !== undefined) return false;
      if (Date.now() - started > this.options.closeTimeoutMs) {
        this.logOnce(
          'warn',
          `undelivered:${job.id}`,
          { code: 'bullmq_end_undelivered', queue: job.queueName, job: job.id, pending: status.pending + status.pendingCheckpoints, lastError: status.lastError },
          `oncebox: job ${job.id} of ${job.queueName} has ended, and waits for the oncebox server to take its last ${status.pending + status.pendingCheckpoints} row(s) ` +
            `before BullMQ hears of it${status.lastError ? ` (${status.lastError.message})` : ''}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, DELIVERY_POLL_MS));
    }
  }

  /** Closes the job's outbox, and removes its file once nothing in it is left to deliver and no retry will open it. */
  private async settle(box: Outbox, identity: JobIdentity, done: boolean): Promise<void> {
    const closed = await box.close({ timeoutMs: this.options.closeTimeoutMs });
    if (!done || closed.pending > 0 || closed.dead > 0) return;
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${identity.path}${suffix}`, { force: true });
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

  private logOnce(level: 'warn' | 'error', cause: string, fields: Record<string, unknown>, message: string): void {
    if (this.logged.has(cause)) return;
    // Bounded: a long-lived worker sees many jobs.
    if (this.logged.size > 10_000) this.logged.clear();
    this.logged.add(cause);
    this.logger[level](fields, message);
  }
}
