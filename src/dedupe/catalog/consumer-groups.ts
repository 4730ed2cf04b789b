import { sql } from 'kysely';
import { z } from 'zod';
import { CONSUMER_ASSETS_CHECKPOINT, CONSUMER_CURSOR_CHECKPOINT, CONSUMER_PAGE_ROWS, LAG_COUNT_CAP, type ConsumerGroup, type Page } from '../../protocol/catalog.js';
import { Limits } from '../../protocol/limits.js';
import type { CatalogScope, PageQuery } from './scope.js';
import type { CatalogDatabase } from './database.js';
import { countLags, groupAssets, MAX_ASSETS_TEXT } from './lag.js';
import { boundedPage } from './page.js';
import { decodePageCursor } from './page-cursor.js';
import { producerScope } from './rows.js';

const groupKey = z.tuple([z.string(), z.string()]);

/**
 * A page of consumer groups (the streams with a cursor mirror), each with its cursor, its assets and its
 * lag behind their newest event, counted over the assets the reader's token reads (lag.ts counts them).
 */
export async function consumerGroups(db: CatalogDatabase, query: PageQuery & { producer?: string | undefined }, scope: CatalogScope): Promise<Page<ConsumerGroup>> {
    const after = decodePageCursor(query.after, groupKey);
    const limit = Math.min(query.limit, CONSUMER_PAGE_ROWS);
    const { q } = db;
    let select = q
      .selectFrom('stream_checkpoints as c')
      .innerJoin('streams as s', (join) => join.onRef('s.producer', '=', 'c.producer').onRef('s.run_id', '=', 'c.run_id').onRef('s.task', '=', 'c.task'))
      .leftJoin('stream_checkpoints as a', (join) =>
        join.onRef('a.producer', '=', 'c.producer').onRef('a.run_id', '=', 'c.run_id').onRef('a.task', '=', 'c.task').on('a.name', '=', CONSUMER_ASSETS_CHECKPOINT),
      )
      // The asset list as far as the most names a group may have takes: a longer one (written before
      // the server bounded it) is not counted.
      .select(['c.producer', 'c.run_id', 'c.value as cursor', sql<string | null>`substr(a.value, 1, ${MAX_ASSETS_TEXT})`.as('assets'), 's.epoch', 's.updated_at', 's.fetched_at'])
      .where('c.name', '=', CONSUMER_CURSOR_CHECKPOINT)
      .where('c.task', '=', '')
      .where(producerScope('c.producer', scope.producers))
      .orderBy('c.producer')
      .orderBy('c.run_id')
      .limit(limit + 1);
    if (query.producer !== undefined) select = select.where('c.producer', '=', query.producer);
    if (after) select = select.where((eb) => eb(eb.refTuple('c.producer', 'c.run_id'), '>', eb.tuple(...after)));
    const rows = await db.all(select);
    const shown = rows.slice(0, limit);
    // A cursor the server took before it checked them (anything but a whole number of 0 or more) counts nothing.
    const cursors = shown.map((row) => cursorOf(row.cursor));
    const named = shown.map((row) => groupAssets(row.assets));
    // A group whose consumer did not say consumes every asset: counted while there are no more than a
    // group may name.
    const everyAsset = named.includes(null) ? (await db.all(db.q.selectFrom('asset_rollup').select('asset').orderBy('asset').limit(Limits.maxGroupAssets + 1))).map((row) => row.asset) : [];
    // Counted only over the assets the reader's token reads events of: a lag is a count of events, and a
    // token that reads none of the group's is shown none.
    const counted = named.map((assets, i) => {
      const all = assets === undefined || cursors[i] === undefined ? [] : (assets ?? everyAsset);
      return all.length > Limits.maxGroupAssets ? [] : all.filter((asset) => scope.assets === null || scope.assets.includes(asset));
    });
    const lags = await countLags(
      db,
      shown.map((row, i) => ({ assets: counted[i]!, cursor: cursors[i] ?? 0 })),
    );
    const items = shown.map((row, i): ConsumerGroup => {
      const { newest, lag } = lags[i]!;
      const uncounted = counted[i]!.length === 0;
      return {
        producer: row.producer,
        group: row.run_id,
        epoch: row.epoch,
        cursor: cursors[i] ?? 0,
        assets: named[i] ?? null,
        newestCursor: uncounted ? null : newest,
        lag: uncounted ? null : Math.min(lag, LAG_COUNT_CAP),
        lagCapped: !uncounted && lag > LAG_COUNT_CAP,
        lastFetchAt: row.fetched_at,
        lastDeliveryAt: row.updated_at,
      };
    });
    return boundedPage(rows, limit, items, (row) => [row.producer, row.run_id], query.maxBytes);
}

/** A group's cursor as its mirror holds it, when it is one (a whole number of 0 or more). */
function cursorOf(text: string): number | undefined {
  const value: unknown = JSON.parse(text);
  return Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : undefined;
}
