import { describe, expect, it } from 'vitest';
import { CachedFigure } from '../../src/dedupe/cached-figure.js';

describe('a cached figure (the consumer lag gauge)', () => {
  it('is computed once a period however often it is asked for, and again after the period, keeping the last figure through a failure', async () => {
    let clock = 0;
    let computed = 0;
    let fail = false;
    const figure = new CachedFigure(
      async () => {
        computed++;
        if (fail) throw new Error('the store is busy');
        return computed;
      },
      15_000,
      () => clock,
    );
    // The first ask waits for the first count; asks within the period read it.
    expect(await figure.get()).toBe(1);
    for (let i = 0; i < 10; i++) expect(await figure.get()).toBe(1);
    expect(computed).toBe(1);
    clock += 15_000;
    // Past the period: counted again in the background, the last figure answered meanwhile.
    expect(await figure.get()).toBe(1);
    await Promise.resolve();
    expect(await figure.get()).toBe(2);
    expect(computed).toBe(2);
    clock += 15_000;
    fail = true;
    expect(await figure.get()).toBe(2);
    await Promise.resolve();
    expect(await figure.get()).toBe(2);
  });
});
