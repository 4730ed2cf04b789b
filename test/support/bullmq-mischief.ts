/**
 * What a BullMQ job's hand-outs do wrong, planned from a seeded stream of numbers and carried in the job's
 * data, keyed by BullMQ's hand-out number (`attemptsStarted`), so that each hand-out misbehaves the same
 * way whichever worker process it lands in. Planned by the adapter's chaos test and by the whole-system
 * simulation; acted out by test/support/bullmq-chaos-worker.ts.
 */
export interface Mischief {
  /** The event loop held before the first batch (no lock renewal): the job is taken over. */
  stallAtStartMs?: number;
  /** After this many batches of the hand-out, the event loop held for `stallMs`. */
  stallAfter?: number;
  stallMs?: number;
  /** The event loop held after the last batch, before the processor returns. */
  stallAtEndMs?: number;
  /** After this many batches, the worker process SIGKILLs itself. */
  killAfter?: number;
  /** After this many batches, the processor throws: BullMQ counts a failed try. */
  throwAfter?: number;
}

/**
 * The mischief of a job's first eight hand-outs. A doomed job throws on most, so that BullMQ fails it for
 * good after its tries; the others mostly end completed. Stalls last `stallMs` drawn between the two
 * bounds: past the workers' lock, so that another worker takes the job over.
 */
export function planMischief(next: () => number, batches: number, stallMs: [number, number] = [2000, 3500]): Record<string, Mischief> {
  const chaos: Record<string, Mischief> = {};
  const stall = () => stallMs[0] + Math.floor(next() * (stallMs[1] - stallMs[0]));
  const batch = () => Math.floor(next() * batches);
  const doomed = next() < 0.3;
  for (let handout = 1; handout <= 8; handout++) {
    const roll = next();
    if (doomed && roll < 0.7) chaos[handout] = { throwAfter: batch() };
    else if (roll < 0.15) continue;
    else if (roll < 0.33) chaos[handout] = { stallAtStartMs: stall() };
    else if (roll < 0.48) chaos[handout] = { stallAfter: batch(), stallMs: stall() };
    else if (roll < 0.6) chaos[handout] = { stallAtEndMs: stall() };
    else if (roll < 0.82) chaos[handout] = { killAfter: batch() };
    else chaos[handout] = { throwAfter: batch() };
  }
  return chaos;
}
