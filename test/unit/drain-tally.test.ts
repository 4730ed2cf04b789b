import { describe, expect, it } from 'vitest';
import type { DrainCounts } from '../../src/cli/drain-progress.js';
import { DrainTally, type DrainFile } from '../../src/cli/drain-tally.js';
import type { SettledRow } from '../../src/outbox/events.js';

const delivered = (id: number): SettledRow => ({ id, state: 'delivered', key: `k${id}`, eventId: `e${id}`, timestamp: '2026-12-03T00:00:00.000Z', duplicate: false });
const dead = (id: number): SettledRow => ({ id, state: 'dead', key: `k${id}`, code: 'unknown_asset', reason: 'no such asset' });

/**
 * A file whose full count takes `costMs` of the clock, whose true counts the test sets, and whose job
 * commits events (`commit`), each a row with the next id.
 */
function fakeFile(costMs: number) {
  const clock = { now: 0 };
  let truth: DrainCounts = { pending: 1000, delivered: 0, dead: 0, checkpoints: 0 };
  let newestId = 1000;
  let counted = 0;
  const file: DrainFile = {
    count: () => {
      counted++;
      clock.now += costMs;
      return { counts: { ...truth }, newestId };
    },
    eventsAfter: (id) => newestId - id,
  };
  return {
    clock,
    file,
    set: (counts: DrainCounts) => (truth = counts),
    commit: (events: number) => {
      newestId += events;
      truth = { ...truth, pending: truth.pending + events };
    },
    counts: () => counted,
  };
}

describe('drain tally', () => {
  it('recounts a costly file only as often as keeps counting under 5% of the time, and moves the count on by what the relay settled', () => {
    const file = fakeFile(500);
    const tally = new DrainTally(file.file, () => file.clock.now);
    expect(file.counts()).toBe(1);
    tally.settled([delivered(1), delivered(2), dead(3)]);
    file.clock.now += 5000;
    // 5 s after a count that took 0.5 s: not yet (every 10 s).
    expect(tally.current()).toEqual({ pending: 997, delivered: 2, dead: 1, checkpoints: 0 });
    expect(file.counts()).toBe(1);
    // The job committed 10 more meanwhile, and the relay settled 500 in all: the recount says so exactly.
    file.set({ pending: 510, delivered: 499, dead: 1, checkpoints: 2 });
    file.clock.now += 5000;
    expect(tally.current()).toEqual({ pending: 510, delivered: 499, dead: 1, checkpoints: 2 });
    expect(file.counts()).toBe(2);
    // What was settled before the recount is in it, and not counted again.
    tally.settled([delivered(4)]);
    expect(tally.current()).toEqual({ pending: 509, delivered: 500, dead: 1, checkpoints: 2 });
  });

  it('counts what the job commits between two counts as pending, without a recount', () => {
    const file = fakeFile(500);
    const tally = new DrainTally(file.file, () => file.clock.now);
    tally.settled(Array.from({ length: 1000 }, (_, i) => delivered(i + 1)));
    file.commit(300);
    file.clock.now += 1000;
    expect(tally.current()).toEqual({ pending: 300, delivered: 1000, dead: 0, checkpoints: 0 });
    tally.settled([delivered(1001)]);
    expect(tally.current()).toEqual({ pending: 299, delivered: 1001, dead: 0, checkpoints: 0 });
    expect(file.counts()).toBe(1);
  });

  it('recounts a cheap file every 100 ms', () => {
    const file = fakeFile(1);
    const tally = new DrainTally(file.file, () => file.clock.now);
    file.clock.now += 99;
    tally.current();
    expect(file.counts()).toBe(1);
    file.clock.now += 1;
    tally.current();
    expect(file.counts()).toBe(2);
  });

  it('never shows fewer than none pending', () => {
    const file = fakeFile(1);
    file.set({ pending: 1, delivered: 0, dead: 0 });
    const tally = new DrainTally(file.file, () => file.clock.now);
    tally.settled([delivered(1), delivered(2)]);
    expect(tally.current().pending).toBe(0);
  });
});
