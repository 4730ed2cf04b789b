import { afterEach, describe, expect, it, vi } from 'vitest';
import { CATALOG_DUTY, CATALOG_QUEUE, CATALOG_QUEUE_PER_READER, CatalogGate, CatalogQueueFullError } from '../../src/dedupe/catalog/gate.js';

/** A read that takes `ms` of the fake clock, noting when it ran. */
const read = (ms: number, log: [number, number][]) => async () => {
  const start = Date.now();
  await new Promise((resolve) => setTimeout(resolve, ms));
  log.push([start, Date.now()]);
};

describe("the catalog's gate", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('lets one read at a time through, each after a rest three times as long as the read before it', async () => {
    vi.useFakeTimers({ now: 0 });
    const gate = new CatalogGate(() => Date.now());
    const log: [number, number][] = [];
    const reads = [gate.run('reader', read(10, log)), gate.run('reader', read(20, log)), gate.run('reader', read(5, log))];
    await vi.runAllTimersAsync();
    await Promise.all(reads);
    const rest = 1 / CATALOG_DUTY - 1;
    expect(log).toEqual([
      [0, 10],
      [10 + 10 * rest, 10 + 10 * rest + 20],
      [10 + 10 * rest + 20 + 20 * rest, 10 + 10 * rest + 20 + 20 * rest + 5],
    ]);
  });

  it('refuses a reader past its share of the waiting reads, as busy, and still takes the others', async () => {
    vi.useFakeTimers({ now: 0 });
    const gate = new CatalogGate(() => Date.now());
    const log: [number, number][] = [];
    const mine = Array.from({ length: CATALOG_QUEUE_PER_READER + 1 }, () => gate.run('greedy', read(1, log)));
    await expect(gate.run('greedy', read(1, log))).rejects.toEqual(new CatalogQueueFullError(true));
    const theirs = gate.run('other', read(1, log));
    await vi.runAllTimersAsync();
    await Promise.all([...mine, theirs]);
    expect(log).toHaveLength(CATALOG_QUEUE_PER_READER + 2);
  });

  it('refuses a read past the most that may wait in all, and serves the rest', async () => {
    vi.useFakeTimers({ now: 0 });
    const gate = new CatalogGate(() => Date.now());
    const log: [number, number][] = [];
    const held = Array.from({ length: CATALOG_QUEUE + 1 }, (_, i) => gate.run(`reader-${i}`, read(1, log)));
    await expect(gate.run('one-more', read(1, log))).rejects.toEqual(new CatalogQueueFullError(false));
    await vi.runAllTimersAsync();
    await Promise.all(held);
    expect(log).toHaveLength(CATALOG_QUEUE + 1);
  });

  it('takes readers in turn: a reader with many reads waiting does not go before another', async () => {
    vi.useFakeTimers({ now: 0 });
    const gate = new CatalogGate(() => Date.now());
    const order: string[] = [];
    const named = (name: string) => async () => void order.push(name);
    const reads = [gate.run('a', named('a1')), gate.run('a', named('a2')), gate.run('a', named('a3')), gate.run('b', named('b1')), gate.run('a', named('a4'))];
    await vi.runAllTimersAsync();
    await Promise.all(reads);
    expect(order).toEqual(['a1', 'a2', 'b1', 'a3', 'a4']);
  });

  it('goes on after a read that failed', async () => {
    vi.useFakeTimers({ now: 0 });
    const gate = new CatalogGate(() => Date.now());
    const failed = gate.run('reader', async () => {
      throw new Error('the store refused');
    });
    await expect(failed).rejects.toThrow('the store refused');
    const next = gate.run('reader', async () => 'answered');
    await vi.runAllTimersAsync();
    await expect(next).resolves.toBe('answered');
  });
});
