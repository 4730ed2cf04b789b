import { sql } from 'kysely';
import { Limits } from '../../protocol/limits.js';
import type { CatalogDatabase } from './database.js';

/** The longest text a group's asset list can take and still be read: its most names, each at its longest, quoted. */
export const MAX_ASSETS_TEXT = Limits.maxGroupAssets * (Limits.maxAssetNameLength + 3) + 2;

/** (asset, cursor) pairs counted per statement, well inside both databases' limits on parameters. */
const PAIRS_PER_STATEMENT = 1000;

/**
 * A group's asset list, as its `oncebox.assets` checkpoint holds it: its distinct names, sorted; null when
 * it has none (a consumer of a version that did not say: every asset); undefined when it cannot be counted
 * (not a list of names, or more than a group may have, written before the server held groups to that).
 */
export function groupAssets(text: string | null): string[] | null | undefined {
  if (text === null) return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!Array.isArray(value) || !value.every((name) => typeof name === 'string')) return undefined;
  const names = [...new Set(value as string[])].sort();
  return names.length > Limits.maxGroupAssets ? undefined : names;
}

/** A group's lag to count: the assets (those the reader may count) and the cursor. */
export interface LagQuestion {
  assets: readonly string[];
  cursor: number;
}

/** The newest event of a group's assets and how many of their events lie after its cursor. */
export interface LagAnswer {
  newest: number | null;
  lag: number;
}

/**
 * Consumer groups' lag, the events of their assets past their cursor, for one page of groups, in a few
 * statements whatever the page: one for the figures of every asset the page names, one per thousand
 * (asset, cursor) pairs for the rest. Each pair costs two index probes and at most MARK_EVERY - 1 index
 * entries, from the asset's mark at or before the cursor (rollup.ts), whatever the backlog: no list a
 * client sends, nor any backlog, makes a page cost more.
 *
 * With the ordinal of the mark (m) and the stored events of the asset between the mark and the cursor
 * (b), the events after the cursor are min(ordinal - m, stored) - b. Retention removes an asset's oldest
 * events first: while it has removed none past the mark, no event between the mark and the cursor is
 * missing from b, and the first term counts every event after the cursor; once it has, the stored events
 * are all there is, and the second does. The counts are as of the rollup's position: events stored since
 * are counted at the next read.
 */
export async function countLags(db: CatalogDatabase, questions: readonly LagQuestion[]): Promise<LagAnswer[]> {
  const assets = [...new Set(questions.flatMap((question) => question.assets))];
  if (assets.length === 0) return questions.map(() => ({ newest: null, lag: 0 }));
  const { q } = db;
  const [[position], figures] = await Promise.all([
    db.all(q.selectFrom('rollup_position').select('up_to').where('id', '=', 1)),
    db.all(
      q
        .selectFrom('asset_rollup as r')
        .select(['r.asset', 'r.ordinal', 'r.events'])
        // One index probe per asset (the newest of an asset is the last entry of its range).
        // The last entry of the asset's range of its index, on both stores (`cursor IS NOT NULL` lets
        // PostgreSQL use its index of an asset's events, which holds only those).
        .select((eb) =>
          eb
            .selectFrom('events as e')
            .select('e.cursor')
            .whereRef('e.asset', '=', 'r.asset')
            .where('e.cursor', 'is not', null)
            .orderBy('e.cursor', 'desc')
            .limit(1)
            .as('newest'),
        )
        .where('r.asset', 'in', assets),
    ),
  ]);
  const upTo = Number(position?.up_to ?? 0);
  const ofAsset = new Map(figures.map((row) => [row.asset, { ordinal: Number(row.ordinal), stored: Number(row.events), newest: row.newest === null ? null : Number(row.newest) }]));
  const pairs = [...new Set(questions.flatMap((question) => question.assets.map((asset) => JSON.stringify([asset, Math.min(question.cursor, upTo)]))))].map(
    (pair) => JSON.parse(pair) as [string, number],
  );
  const after = new Map<string, number>();
  for (let start = 0; start < pairs.length; start += PAIRS_PER_STATEMENT) {
    for (const row of await countPast(db, pairs.slice(start, start + PAIRS_PER_STATEMENT))) {
      const figure = ofAsset.get(row.asset) ?? { ordinal: 0, stored: 0 };
      const past = Math.min(figure.ordinal - Number(row.mark_ordinal ?? 0), figure.stored) - Number(row.n);
      after.set(JSON.stringify([row.asset, Number(row.at)]), Math.max(0, past));
    }
  }
  return questions.map((question) => {
    const at = Math.min(question.cursor, upTo);
    const newest = question.assets.map((asset) => ofAsset.get(asset)?.newest ?? null).filter((cursor): cursor is number => cursor !== null);
    return {
      newest: newest.length === 0 ? null : Math.max(...newest),
      lag: question.assets.reduce((sum, asset) => sum + (after.get(JSON.stringify([asset, at])) ?? 0), 0),
    };
  });
}

/** For each (asset, cursor): the mark at or before the cursor, and the asset's stored events between it and the cursor. */
async function countPast(db: CatalogDatabase, pairs: readonly [string, number][]) {
  const values = sql.join(pairs.map(([asset, at]) => sql`(${asset}, CAST(${at} AS BIGINT))`));
  const query = sql<{ asset: string; at: number; mark_ordinal: number | null; n: number }>`
    WITH asked(asset, at) AS (VALUES ${values}),
    marked AS (
      SELECT asked.asset, asked.at,
             (SELECT max(m.cursor) FROM asset_marks m WHERE m.asset = asked.asset AND m.cursor <= asked.at) AS mark_cursor
      FROM asked)
    SELECT marked.asset, marked.at,
           (SELECT m.ordinal FROM asset_marks m WHERE m.asset = marked.asset AND m.cursor = marked.mark_cursor) AS mark_ordinal,
           (SELECT count(*) FROM events e WHERE e.asset = marked.asset AND e.cursor > coalesce(marked.mark_cursor, 0) AND e.cursor <= marked.at) AS n
    FROM marked`;
  return db.all({ compile: () => query.compile(db.q) });
}
