import { DelayedError, RateLimitError, UnrecoverableError, WaitingChildrenError, WaitingError, type Job } from 'bullmq';
import type { LockState } from './job-lock.js';

/** BullMQ's own decision, as `moveToFailed` makes it: no retry after an UnrecoverableError or the last try. */
export function bullmqWillRetry(job: Job, error: unknown, state: LockState): boolean {
  if (error instanceof UnrecoverableError || (error as Error | null)?.name === 'UnrecoverableError') return false;
  // job.discard(), deprecated but still honoured by BullMQ; the field is not in its public type.
  if ((job as unknown as { discarded?: boolean }).discarded === true) return false;
  return state.attemptsMade + 1 < (job.opts.attempts ?? 1);
}

/** The errors a processor throws to move its job itself, which BullMQ does not count as failures. @internal */
export function isBullmqMove(error: unknown): boolean {
  if (error instanceof DelayedError || error instanceof WaitingError || error instanceof WaitingChildrenError || error instanceof RateLimitError) return true;
  const name = (error as Error | null)?.name;
  return name === 'DelayedError' || name === 'WaitingError' || name === 'WaitingChildrenError' || name === 'RateLimitError';
}

/**
 * The processor's return value as BullMQ will store it (JSON), checked before the terminal commit: a
 * value BullMQ cannot store (a BigInt, a cycle) would fail the job after oncebox recorded its success.
 * @internal
 */
export function assertStorable(value: unknown): void {
  try {
    JSON.stringify(value);
  } catch (error) {
    throw new TypeError(`the processor returned a value BullMQ cannot store as JSON (${(error as Error).message}); return plain JSON data`, { cause: error });
  }
}
