import { sql } from 'kysely';
import { countsByAsset } from '../tables.js';
import type { CatalogDatabase, CatalogSteps } from './database.js';

/**
 * Per-asset counts (events, distinct partitions, ordinals and their marks) without a cost to the ingest:
 * the counts cover the events up to `rollup_position.up_to`, and each read of the catalog first counts the
 * events after it, a slice of cursors at a time. Compaction lowers the counts for the events it removes below `up_to`.
 * Both take the position's row lock (PostgreSQL), so that an instance's compaction and another's
 * rollup never count the same slice differently.
 */

/**
 * Events counted per transaction, so that a long backlog never holds writers (nor, on the embedded store,
 * the event loop: a slice is one synchronous transaction) up for long.
 */
const SLICE = 10_000;
/**
 * Every how many events of an asset one is marked with its ordinal: a consumer group's lag counts at most
 * this many index entries per asset, from the mark at or before its cursor (catalog.ts, `lag`).
 */
export const MARK_EVERY = 64;
/** Marks written per statement, well inside both databases' limits on parameters. */
const MARKS_PER_INSERT = 500;

function* lockedPosition(db: CatalogDatabase): CatalogSteps<number> {
  const query = db.q.selectFrom('rollup_position').select('up_to').where('id', '=', 1);
  const [row] = (yield db.dialect === 'postgres' ? query.forUpdate() : query) as { up_to: number }[];
  return Number(row!.up_to);
}

/** Counts the next slice of events; returns whether more remain. */
function* advanceSlice(db: CatalogDatabase): CatalogSteps<boolean> {
  const { q } = db;
  const low = yield* lockedPosition(db);
  const [top] = (yield q.selectFrom('events').select((eb) => eb.fn.max('cursor').as('top')).where('cursor', 'is not', null)) as { top: number | null }[];
  const newest = Number(top?.top ?? 0);
  const high = Math.min(newest, low + SLICE);
  if (high <= low) return false;
  const events = (yield q
    .selectFrom('events')
    .select(['asset', (eb) => eb.fn.countAll().as('n')])
    .where('cursor', '>', low)
    .where('cursor', '<=', high)
    .groupBy('asset')) as { asset: string; n: number }[];
  // A partition is new to the counts when no event of it lies at or below the old position.
  const partitions = (yield q
    .selectFrom('events as e')
    .select(['e.asset', sql<number>`count(DISTINCT e.partition_key)`.as('n')])
    .where('e.cursor', '>', low)
    .where('e.cursor', '<=', high)
    .where('e.partition_key', 'is not', null)
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('events as o')
            .select(sql.lit(1).as('one'))
            .whereRef('o.asset', '=', 'e.asset')
            .whereRef('o.partition_key', '=', 'e.partition_key')
            .where('o.cursor', '<=', low),
        ),
      ),
    )
    .groupBy('e.asset')) as { asset: string; n: number }[];
  const fresh = new Map(partitions.map((row) => [row.asset, Number(row.n)]));
  // The slice's events numbered per asset, after the ordinals counted so far: every MARK_EVERY-th marked.
  const ordinal = sql<number>`coalesce(r.ordinal, 0) + s.rn`;
  const marks = (yield q
    .selectFrom((eb) =>
      eb
        .selectFrom('events')
        .select(['asset', 'cursor', sql<number>`row_number() OVER (PARTITION BY asset ORDER BY cursor)`.as('rn')])
        .where('cursor', '>', low)
        .where('cursor', '<=', high)
        .as('s'),
    )
    .leftJoin('asset_rollup as r', 'r.asset', 's.asset')
    .select(['s.asset', 's.cursor', ordinal.as('ordinal')])
    .where(sql<number>`(${ordinal}) % ${sql.lit(MARK_EVERY)}`, '=', 0)) as { asset: string; cursor: number; ordinal: number }[];
  for (let at = 0; at < marks.length; at += MARKS_PER_INSERT) {
    const rows = marks.slice(at, at + MARKS_PER_INSERT).map((mark) => ({ asset: mark.asset, cursor: Number(mark.cursor), ordinal: Number(mark.ordinal) }));
    // A slice counted again (a transaction that failed after this) finds its marks there: the same ones.
    yield q.insertInto('asset_marks').values(rows).onConflict((oc) => oc.columns(['asset', 'cursor']).doNothing());
  }
  for (const row of [...events].sort((a, b) => (a.asset < b.asset ? -1 : 1))) {
    const n = Number(row.n);
    const p = fresh.get(row.asset) ?? 0;
    yield q
      .insertInto('asset_rollup')
      .values({ asset: row.asset, events: n, partitions: p, ordinal: n })
      .onConflict((oc) =>
        oc.column('asset').doUpdateSet((eb) => ({
          events: eb('asset_rollup.events', '+', eb.ref('excluded.events')),
          partitions: eb('asset_rollup.partitions', '+', eb.ref('excluded.partitions')),
          ordinal: eb('asset_rollup.ordinal', '+', eb.ref('excluded.ordinal')),
        })),
      );
  }
  yield q.updateTable('rollup_position').set({ up_to: high }).where('id', '=', 1);
  return high < newest;
}

/** A removed event, as compaction's DELETE returns it. */
export interface RemovedEvent {
  asset: string;
  partition_key: string | null;
  cursor: number | null;
}

/** Lowers the counts for events compaction removed, inside compaction's transaction. */
export function* forgetRemoved(db: CatalogDatabase, removed: readonly RemovedEvent[]): CatalogSteps<void> {
  const { q } = db;
  const upTo = yield* lockedPosition(db);
  const counted = removed.filter((row) => row.cursor !== null && Number(row.cursor) <= upTo);
  for (const [asset, n] of [...countsByAsset(counted)].sort(([a], [b]) => (a < b ? -1 : 1))) {
    yield q
      .updateTable('asset_rollup')
      .set((eb) => ({ events: eb('events', '-', n) }))
      .where('asset', '=', asset);
  }
  const partitions = new Map<string, { asset: string; partitionKey: string }>();
  for (const row of counted) {
    if (row.partition_key !== null) partitions.set(JSON.stringify([row.asset, row.partition_key]), { asset: row.asset, partitionKey: row.partition_key });
  }
  for (const { asset, partitionKey } of partitions.values()) {
    const left = yield q
      .selectFrom('events')
      .select('cursor')
      .where('asset', '=', asset)
      .where('partition_key', '=', partitionKey)
      .where('cursor', '<=', upTo)
      .limit(1);
    if (left.length === 0) {
      yield q
        .updateTable('asset_rollup')
        .set((eb) => ({ partitions: eb('partitions', '-', 1) }))
        .where('asset', '=', asset);
    }
  }
}

/** Brings the counts up to the newest event, one slice per transaction. */
export async function advanceRollup(db: CatalogDatabase): Promise<void> {
  while (await db.transaction(() => advanceSlice(db)));
}
