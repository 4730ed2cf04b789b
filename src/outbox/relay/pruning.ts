import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import { params, prepare, queryBuilder } from '../../sqlite/statements.js';
import type { OutboxSchema } from '../file/schema.js';

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
