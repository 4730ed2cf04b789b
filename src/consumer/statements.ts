import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import type { OutboxSchema } from '../outbox/file/schema.js';
import { params, prepare, prepareConstant, queryBuilder } from '../sqlite/statements.js';

/** @internal What a consumer reads and writes in its file besides the outbox: processed marks and trigger state. */
export type ConsumerStatements = ReturnType<typeof consumerStatements>;

/** @internal */
export function consumerStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const p = {
    event: params<{ eventId: string }>(),
    consumed: params<{ eventId: string; cursor: number; now: number }>(),
    partition: params<{ trigger: string; partitionKey: string }>(),
    arrival: params<{ trigger: string; partitionKey: string; asset: string; event: string }>(),
    firing: params<{ trigger: string; partitionKey: string; fired: number; lastCursor: number; now: number }>(),
    rebuild: params<{ upTo: number }>(),
    progress: params<{ doneThrough: number }>(),
  };
  return {
    isConsumed: prepare(db, p.event, q.selectFrom('consumed').select('cursor').where('event_id', '=', p.event.eventId)),
    markConsumed: prepare(
      db,
      p.consumed,
      q
        .insertInto('consumed')
        .values({ event_id: p.consumed.eventId, cursor: p.consumed.cursor, consumed_at: p.consumed.now })
        .onConflict((oc) => oc.doNothing()),
    ),
    arrivals: prepare(
      db,
      p.partition,
      q
        .selectFrom('trigger_arrivals')
        .select(['asset', 'event'])
        .where('trigger', '=', p.partition.trigger)
        .where('partition_key', '=', p.partition.partitionKey),
    ),
    saveArrival: prepare(
      db,
      p.arrival,
      q
        .insertInto('trigger_arrivals')
        .values({ trigger: p.arrival.trigger, partition_key: p.arrival.partitionKey, asset: p.arrival.asset, event: p.arrival.event })
        .onConflict((oc) => oc.columns(['trigger', 'partition_key', 'asset']).doUpdateSet({ event: p.arrival.event })),
    ),
    firing: prepare(
      db,
      p.partition,
      q
        .selectFrom('trigger_firings')
        .select(['fired', 'last_cursor'])
        .where('trigger', '=', p.partition.trigger)
        .where('partition_key', '=', p.partition.partitionKey),
    ),
    saveFiring: prepare(
      db,
      p.firing,
      q
        .insertInto('trigger_firings')
        .values({
          trigger: p.firing.trigger,
          partition_key: p.firing.partitionKey,
          fired: p.firing.fired,
          last_cursor: p.firing.lastCursor,
          fired_at: p.firing.now,
        })
        .onConflict((oc) =>
          oc.columns(['trigger', 'partition_key']).doUpdateSet({ fired: p.firing.fired, last_cursor: p.firing.lastCursor, fired_at: p.firing.now }),
        ),
    ),
    rebuild: prepareConstant(db, q.selectFrom('trigger_rebuild').select(['up_to', 'done_through']).where('id', '=', sql.lit(1))),
    // Once per file: the row stays when the rebuild is done, so a later start does not plan it again.
    planRebuild: prepare(
      db,
      p.rebuild,
      q
        .insertInto('trigger_rebuild')
        .values({ id: sql.lit(1), up_to: p.rebuild.upTo, done_through: sql.lit(0) })
        .onConflict((oc) => oc.doNothing()),
    ),
    advanceRebuild: prepare(db, p.progress, q.updateTable('trigger_rebuild').set({ done_through: p.progress.doneThrough }).where('id', '=', sql.lit(1))),
  };
}
