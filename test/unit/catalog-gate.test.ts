import { afterEach, describe, expect, it, vi } from 'vitest';
import { CATALOG_DUTY, CATALOG_QUEUE, CatalogGate, CatalogQueueFullError } from '../../src/dedupe/catalog/gate.js';

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
    const reads = [gate.run(read(10, log)), gate.run(read(20, log)), gate.run(read(5, log))];
    await vi.runAllTimersAsync();
    await Promise.all(reads);
    const rest = 1 / CATALOG_DUTY - 1;
    expect(log).toEqual([
      [0, 10],
      [10 + 10 * rest, 10 + 10 * rest + 20],
      [10 + 10 * rest + 20 + 20 * rest, 10 + 10 * rest + 20 + 20 * rest + 5],
    ]);
  });

  it('refuses a read past the most that may wait, as busy, and serves the rest', async () => {
    vi.useFakeTimers({ now: 0 });
    const gate = new CatalogGate(() => Date.now());
    const log: [number, number][] = [];
    const held = Array.from({ length: CATALOG_QUEUE + 1 }, () => gate.run(read(1, log)));
    await expect(gate.run(read(1, log))).rejects.toBeInstanceOf(CatalogQueueFullError);
    await vi.runAllTimersAsync();
    await Promise.all(held);
    expect(log).toHaveLength(CATALOG_QUEUE + 1);
  });

  it('goes on after a read that failed', async () => {
    vi.useFakeTimers({ now: 0 });
    const gate = new CatalogGate(() => Date.now());
    const failed = gate.run(async () => {
      throw new Error('the store refused');
    });
    await expect(failed).rejects.toThrow('the store refused');
    const next = gate.run(async () => 'answered');
    await vi.runAllTimersAsync();
    await expect(next).resolves.toBe('answered');
  });
});
