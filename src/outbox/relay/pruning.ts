import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import { isTransientSqliteError } from '../../sqlite/local-errors.js';
import { params, prepare, queryBuilder } from '../../sqlite/statements.js';
import type { OutboxSchema } from '../file/schema.js';

/** How often the relay prunes, at most. */
const PRUNE_EVERY_MS = 60_000;
/** Rows deleted per statement: a long prune never holds the file's write lock for long. */
const PRUNE_BATCH = 1000;

/**
 * Deletes delivered rows once they are old enough that nothing reads them. The newest row of each
 * stream stays: a reopened attempt numbers its next rows from it.
 * @internal
 */
export class DeliveredRows {
  private readonly pruneBatch;

  constructor(db: Database.Database) {
    const q = queryBuilder<OutboxSchema>(db);
    const prune = params<{ cutoff: number; limit: number }>();
    this.pruneBatch = prepare(
      db,
      prune,
      q
        .deleteFrom('outbox')
        .where('id', 'in', (sub) =>
          sub
            .selectFrom('outbox')
            .select('id')
            .where('state', '=', sql.lit('delivered'))
            .where('settled_at', '<', prune.cutoff)
            .where('id', 'not in', (newest) => newest.selectFrom('outbox').select((eb) => eb.fn.max('id').as('id')).groupBy(['run_id', 'task', 'attempt']))
            .limit(prune.limit),
        ),
    );
  }

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
      const deleted = this.pruneBatch.run({ cutoff, limit: PRUNE_BATCH }).changes;
      total += deleted;
      if (deleted < PRUNE_BATCH) return total;
    }
  }
}
