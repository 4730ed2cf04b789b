import type { SettledRow } from '../outbox/events.js';
import type { DrainCounts } from './drain-progress.js';

/** A recount may take at most this share of a drain's time. */
const RECOUNT_SHARE = 0.05;
/** Never recount more often than this, however cheap the count. */
const MIN_RECOUNT_MS = 100;

/** What the tally reads of the file. */
export interface DrainFile {
  /** The exact counts, and the newest row's id when they were taken (read together, in one snapshot). */
  count(): { counts: DrainCounts; newestId: number };
  /** Events committed after the row with this id: an index range, cheap however large the file. */
  eventsAfter(id: number): number;
}

/**
 * The counts `oncebox relay --drain` shows while it drains. Counting the file's rows by state scans the
 * whole outbox table (about half a second over a million rows, blocking the relay in the same thread),
 * so it recounts only as often as keeps the counting under 5% of the time. In between it moves the last
 * count on by the events the job committed since (found by row id) and the rows the relay settled. Each
 * recount is exact again.
 */
export class DrainTally {
  private counted: DrainCounts;
  private newestId = 0;
  // Set by each recount, the first one in the constructor.
  private countedAt = 0;
  private recountEveryMs = MIN_RECOUNT_MS;
  private deliveredSince = 0;
  private deadSince = 0;

  constructor(
    private readonly file: DrainFile,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.counted = this.recount();
  }

  /** The relay settled these rows (its onSettled hook); counted until the next recount makes them exact. */
  settled(rows: readonly SettledRow[]): void {
    for (const row of rows) {
      if (row.state === 'delivered') this.deliveredSince++;
      else this.deadSince++;
    }
  }

  /** The counts now: recounted when the last count is old enough, else the last count moved on. */
  current(): DrainCounts {
    if (this.now() - this.countedAt >= this.recountEveryMs) this.counted = this.recount();
    const committed = this.file.eventsAfter(this.newestId);
    return {
      ...this.counted,
      pending: Math.max(0, this.counted.pending + committed - this.deliveredSince - this.deadSince),
      delivered: this.counted.delivered + this.deliveredSince,
      dead: this.counted.dead + this.deadSince,
    };
  }

  private recount(): DrainCounts {
    const started = this.now();
    const { counts, newestId } = this.file.count();
    this.newestId = newestId;
    // Settled rows before this point are in the count now (the relay settles in this same thread).
    this.deliveredSince = 0;
    this.deadSince = 0;
    this.countedAt = this.now();
    this.recountEveryMs = Math.max(MIN_RECOUNT_MS, (this.countedAt - started) / RECOUNT_SHARE);
    return counts;
  }
}
