import { describe, expect, it } from 'vitest';
import { AsyncCommitError, OptionsError } from '../../src/protocol/errors.js';
import { assertSyncCallback, refusePromise } from '../../src/outbox/commit/sync-callback.js';

describe('the check of a transaction callback', () => {
  it('refuses a non-function and an async function before running any of it, naming the call', () => {
    let ran = false;
    expect(() => assertSyncCallback(42, 'ctx.commit(fn)')).toThrow(new OptionsError('fn', 'ctx.commit(fn): fn must be a function (tx) => { … }, not number'));
    expect(() =>
      assertSyncCallback(async () => {
        ran = true;
      }, 'commit(fn)'),
    ).toThrow(AsyncCommitError);
    expect(ran).toBe(false);
    expect(() => assertSyncCallback(() => undefined, 'commit(fn)')).not.toThrow();
    // An object whose constructor is not a function's (Object.create(null) has none) is still a non-function.
    expect(() => assertSyncCallback(Object.create(null), 'commit(fn)')).toThrow(OptionsError);
  });

  it('refuses a promise or any thenable a callback returned, and nothing else', async () => {
    const rejected = Promise.reject(new Error('abandoned'));
    expect(() => refusePromise(rejected)).toThrow(AsyncCommitError);
    const thenableFunction = Object.assign(() => undefined, { then: () => undefined });
    expect(() => refusePromise(thenableFunction)).toThrow(AsyncCommitError);
    expect(() => refusePromise({ then: () => undefined })).toThrow(AsyncCommitError);
    for (const value of [undefined, null, 0, 'then', { then: 1 }, () => undefined]) expect(() => refusePromise(value)).not.toThrow();
    // The abandoned promise's rejection is handled: it surfaces nowhere later.
    await new Promise((resolve) => setTimeout(resolve, 10));
  });
});
