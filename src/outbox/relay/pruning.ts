import { isTransientSqliteError } from '../../sqlite/local-errors.js';
import type { RowStatements } from '../file/rows.js';

/** How often the relay prunes, at most. */
const PRUNE_EVERY_MS = 60_000;
/** Rows deleted per statement: a long prune never holds the file's write lock for long. */
const PRUNE_BATCH = 1000;

/**
 * Deletes delivered rows once they are old enough that nothing reads them (the statement is the rows'
 * own, `pruneDelivered`): this is when and how much.
 * @internal
 */
export class DeliveredRows {
  constructor(private readonly rows: RowStatements) {}

  private lastPrune = 0;

  /**
   * Prunes what is older than `afterMs` at most once a minute (the relay calls it after each batch); a
   * prune that could not be written (the file busy or full) waits for a later call, as pruning only
   * frees space.
   */
  pruneNowAndThen(afterMs: number | null | undefined, now: number): void {
    if (afterMs === null || afterMs === undefined || now - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = now;
    try {
      this.pruneSettledBefore(now - afterMs);
    } catch (error) {
      if (!isTransientSqliteError(error)) throw error;
    }
  }

  /** Deletes the delivered rows settled before `cutoff`, in bounded batches; returns how many. */
  pruneSettledBefore(cutoff: number): number {
    let total = 0;
    for (;;) {
      const deleted = this.rows.pruneDelivered.run({ cutoff, limit: PRUNE_BATCH }).changes;
      total += deleted;
      if (deleted < PRUNE_BATCH) return total;
    }
  }
}
