import { AsyncCommitError, OptionsError } from '../../protocol/errors.js';

/**
 * @internal Refuses, before it runs, a callback meant to run inside a SQLite transaction that is not a
 * function or is async: a transaction cannot span an `await`.
 */
export function assertSyncCallback(fn: unknown, call: string): void {
  if (typeof fn !== 'function') throw new OptionsError('fn', `${call}: fn must be a function (tx) => { … }, not ${typeof fn}`);
  if (fn.constructor?.name === 'AsyncFunction') throw new AsyncCommitError();
}

/**
 * @internal Refuses what a transaction's callback returned when it is a promise (a function that returns
 * one without being `async`): the transaction is rolled back rather than committed half done.
 */
export function refusePromise(result: unknown): void {
  if (!isPromiseLike(result)) return;
  // Keep the abandoned promise from surfacing later as an unhandled rejection.
  Promise.resolve(result).catch(() => undefined);
  throw new AsyncCommitError();
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as { then?: unknown }).then === 'function';
}
