import { sql } from 'kysely';
import { z } from 'zod';
import {
  CATALOG_PAGE_ROWS,
  CHECKPOINT_PREVIEW_CHARS,
  DEFAULT_STALE_RUN_AFTER_MS,
  type AssetSummary,
  type ConsumerGroup,
  type EventRef,
  type Overview,
  type Page,
  type PartitionPage,
  type PartitionSummary,
  type Rejection,
  type StreamDetail,
  type StreamOutcome,
  type StreamSummary,
} from '../../protocol/catalog.js';
import type { RejectionCode } from '../../protocol/errors.js';
import { LifecycleAsset } from '../../protocol/lifecycle.js';
import { streamOf, toStoredEvent, type EventRow } from '../tables.js';
import type { CatalogDatabase } from './database.js';
import { consumerGroups } from './consumer-groups.js';
import type { CatalogScope, PageQuery } from './scope.js';
import { boundedPage, PAGE_BYTES } from './page.js';
import { decodePageCursor, nameKey } from './page-cursor.js';
import { advanceRollup } from './rollup.js';
import { streamSummaries } from './stream-summaries.js';
import { EVENT_REF_COLUMNS, isConsumer, producerScope, REFUSAL_TABLES, refusalKey, refusals, startsWith, toEventRef, toRejection } from './rows.js';

export type { CatalogScope, PageQuery } from './scope.js';

/** A run's lifecycle events its page shows, the newest. */
const LIFECYCLE_LISTED = 200;

const LIFECYCLE_ASSETS = [LifecycleAsset.Succeeded, LifecycleAsset.Failed, LifecycleAsset.Fenced];
const streamKey = z.tuple([z.string(), z.string(), z.string(), z.string()]);
// The attempt within what both stores keep it as (a 32-bit integer), so that a forged one is a 400.
const rejectionKey = z.tuple([z.number(), z.string(), z.string(), z.string(), z.number().int().min(0).max(2 ** 31 - 1), z.number(), z.string(), z.string()]);

/**
 * The catalog's reads, over either store: assets with their counts, an asset's partitions, streams with
 * their attempts and outcome, consumer groups with their lag, and the refusals. Every list is paged by
 * its sort key (never an offset) and filtered by the reader's scope in SQL, so a page costs the same on
 * a store of ten events or ten million.
 */
export class Catalog {
  private rollup: Promise<void> | undefined;

  /** @internal Each store makes its own, over its database. */
  constructor(
    private readonly db: CatalogDatabase,
    /** The store's clock: what a fetch note and the overview's day are stamped by. */
    readonly now: () => Date,
    /**
     * A run with no lifecycle end and no request for this long is shown stale rather than running: its job
     * died unheard, or never calls complete(). Consumer groups have no end, and are never stale.
     */
    private readonly staleRunAfterMs: number = DEFAULT_STALE_RUN_AFTER_MS,
  ) {}

  /** The newest `updated_at` a run without an end may have and be stale (ISO strings sort as times). */
  private staleBefore(): string {
    return new Date(this.now().getTime() - this.staleRunAfterMs).toISOString();
  }

  async assets(query: PageQuery & { prefix?: string | undefined }, scope: CatalogScope): Promise<Page<AssetSummary>> {
    await this.ready();
    const after = decodePageCursor(query.after, nameKey)?.[0];
    const limit = Math.min(query.limit, CATALOG_PAGE_ROWS);
    const { q } = this.db;
    let names = q
      .selectFrom((eb) => eb.selectFrom('assets').select('name').union(eb.selectFrom('asset_rollup').select('asset as name')).as('known'))
      .select('name')
      .orderBy('name');
    if (after !== undefined) names = names.where('name', '>', after);
    if (query.prefix) names = names.where(startsWith('name', query.prefix));
    if (scope.assets !== null) names = names.where('name', 'in', scope.assets.length === 0 ? [''] : [...scope.assets]);
    const rows = await this.db.all(names.limit(limit + 1));
    return boundedPage(rows, limit, await this.summaries(rows.slice(0, limit).map((row) => row.name)), (row) => [row.name], query.maxBytes);
  }

  /** One asset's partitions in key order, each with its newest event; undefined when the asset is unknown. */
  async partitions(asset: string, query: PageQuery & { prefix?: string | undefined }): Promise<PartitionPage | undefined> {
    await this.ready();
    const [summary] = await this.summaries([asset]);
    if (!summary || (!summary.registered && summary.events === 0)) return undefined;
    const after = decodePageCursor(query.after, nameKey)?.[0];
    const limit = Math.min(query.limit, CATALOG_PAGE_ROWS);
    const { q } = this.db;
    // An event row is its own dedupe record (on both stores) and counts the retries it absorbed.
    let groups = q
      .selectFrom('events as e')
      .select(sql<number>`sum(e.duplicates)`.as('duplicates'))
      .select(['e.partition_key', (eb) => eb.fn.countAll().as('events'), (eb) => eb.fn.max('e.cursor').as('cursor')])
      .where('e.asset', '=', asset)
      .where('e.partition_key', 'is not', null)
      .where('e.cursor', 'is not', null)
      .groupBy('e.partition_key')
      .orderBy('e.partition_key')
      .limit(limit + 1);
    if (after !== undefined) groups = groups.where('e.partition_key', '>', after);
    if (query.prefix) groups = groups.where(startsWith('e.partition_key', query.prefix));
    const rows = await this.db.all(groups);
    const shown = rows.slice(0, limit);
    const newest = await this.eventsAt(shown.map((row) => Number(row.cursor)));
    const items = shown.map((row): PartitionSummary => {
      const event = newest.get(Number(row.cursor))!;
      const events = Number(row.events);
      const duplicates = Number(row.duplicates);
      return {
        partitionKey: row.partition_key!,
        partitionDate: event.partitionDate,
        state: events > 1 ? 'republished' : duplicates > 0 ? 'deduplicated' : 'published',
        events,
        duplicates,
        event: event.ref,
      };
    });
    return { asset: summary, ...boundedPage(rows, limit, items, (row) => [row.partition_key!], query.maxBytes) };
  }

  async streams(
    query: PageQuery & { producer?: string | undefined; runId?: string | undefined; kind?: 'run' | 'consumer' | undefined; outcome?: StreamOutcome | undefined },
    scope: CatalogScope,
  ): Promise<Page<StreamSummary>> {
    const after = decodePageCursor(query.after, streamKey);
    const limit = Math.min(query.limit, CATALOG_PAGE_ROWS);
    // One instant for the filter and the summaries: a run the filter took for stale is shown stale.
    const staleBefore = this.staleBefore();
    const { q } = this.db;
    let select = q
      .selectFrom('streams as s')
      .select(['s.producer', 's.run_id', 's.task', 's.epoch', 's.updated_at', 's.outcome', (eb) => isConsumer(eb).as('consumer')])
      .orderBy('s.updated_at', 'desc')
      .orderBy('s.producer', 'desc')
      .orderBy('s.run_id', 'desc')
      .orderBy('s.task', 'desc')
      .limit(limit + 1);
    select = select.where(producerScope('s.producer', scope.producers));
    if (query.producer !== undefined) select = select.where('s.producer', '=', query.producer);
    if (query.runId !== undefined) select = select.where('s.run_id', '=', query.runId);
    if (query.kind !== undefined) select = select.where((eb) => (query.kind === 'consumer' ? isConsumer(eb) : eb.not(isConsumer(eb))));
    if (query.outcome === 'running' || query.outcome === 'stale') {
      select = select.where((eb) => eb.or([eb('s.outcome', 'is', null), eb('s.outcome', '=', 'retrying')]));
      select =
        query.outcome === 'stale'
          ? select.where((eb) => eb.and([eb('s.updated_at', '<', staleBefore), eb.not(isConsumer(eb))]))
          : select.where((eb) => eb.or([eb('s.updated_at', '>=', staleBefore), isConsumer(eb)]));
    } else if (query.outcome !== undefined) select = select.where('s.outcome', '=', query.outcome);
    if (after) {
      select = select.where((eb) => eb(eb.refTuple('s.updated_at', 's.producer', 's.run_id', 's.task'), '<', eb.tuple(...after)));
    }
    const rows = await this.db.all(select);
    // A list shows each checkpoint's value cut to a preview; the stream's own page has them whole.
    const items = await streamSummaries(this.db, rows.slice(0, limit), staleBefore, CHECKPOINT_PREVIEW_CHARS);
    return boundedPage(rows, limit, items, (row) => [row.updated_at, row.producer, row.run_id, row.task], query.maxBytes);
  }

  /** One stream whole: its summary, its lifecycle events and its newest refusals; undefined when unknown. */
  async stream(producer: string, runId: string, task: string | null): Promise<StreamDetail | undefined> {
    const { q } = this.db;
    const key = { producer, run_id: runId, task: streamOf(producer, runId, task).task };
    const rows = await this.db.all(
      q
        .selectFrom('streams as s')
        .select(['s.producer', 's.run_id', 's.task', 's.epoch', 's.updated_at', 's.outcome', (eb) => isConsumer(eb).as('consumer')])
        .where('s.producer', '=', producer)
        .where('s.run_id', '=', runId)
        .where('s.task', '=', key.task),
    );
    if (rows.length === 0) return undefined;
    const [[summary], lifecycle, rejections] = await Promise.all([
      streamSummaries(this.db, rows, this.staleBefore()),
      this.db.all(
        q
          .selectFrom('events')
          .selectAll()
          .where('producer', '=', producer)
          .where('run_id', '=', runId)
          .where((eb) => (key.task === '' ? eb('task', 'is', null) : eb('task', '=', key.task)))
          .where('asset', 'in', LIFECYCLE_ASSETS)
          .where('cursor', 'is not', null)
          .orderBy('cursor', 'desc')
          .limit(LIFECYCLE_LISTED),
      ),
      this.db.all(refusals(q, (select) => select.where('producer', '=', producer).where('run_id', '=', runId).where('task', '=', key.task), 50)),
    ]);
    return {
      ...summary!,
      lifecycle: lifecycle.reverse().map((row) => toStoredEvent(row as EventRow)),
      rejections: rejections.map(toRejection),
    };
  }

  async consumers(query: PageQuery & { producer?: string | undefined }, scope: CatalogScope): Promise<Page<ConsumerGroup>> {
    // The counts, ordinals and marks up to the newest event: the lag is counted from them.
    await this.ready();
    return consumerGroups(this.db, query, scope);
  }

  async rejections(
    query: PageQuery & { producer?: string | undefined; runId?: string | undefined; code?: RejectionCode | undefined; since?: string | undefined },
    scope: CatalogScope,
  ): Promise<Page<Rejection>> {
    const after = decodePageCursor(query.after, rejectionKey);
    const limit = Math.min(query.limit, CATALOG_PAGE_ROWS);
    const since = query.since === undefined ? undefined : Date.parse(/(Z|[+-]\d\d:\d\d)$/i.test(query.since) ? query.since : `${query.since}Z`);
    const rows = await this.db.all(
      refusals(
        this.db.q,
        (select) => {
          let filtered = select.where(producerScope('producer', scope.producers));
          if (query.producer !== undefined) filtered = filtered.where('producer', '=', query.producer);
          if (query.runId !== undefined) filtered = filtered.where('run_id', '=', query.runId);
          if (query.code !== undefined) filtered = filtered.where('code', '=', query.code);
          if (since !== undefined) filtered = filtered.where('created_at', '>=', since);
          // Eight columns: more than kysely's typed tuples take.
          if (after) filtered = filtered.where(sql<boolean>`(created_at, producer, run_id, task, attempt, seq, key, code) < (${sql.join(after)})`);
          return filtered;
        },
        limit + 1,
      ),
    );
    return boundedPage(rows, limit, rows.slice(0, limit).map(toRejection), refusalKey, query.maxBytes);
  }

  /** What the console's first page shows, in one answer. */
  async overview(scope: CatalogScope): Promise<Overview> {
    const at = this.now();
    const dayAgo = at.getTime() - 24 * 3600_000;
    const [assets, running, stale, consumers, recent, [lastDay], newestCursor] = await Promise.all([
      // Five lists in one answer: a fifth of a page's bytes each.
      this.assets({ limit: 20, maxBytes: PAGE_BYTES / 5 }, scope),
      this.streams({ limit: 20, kind: 'run', outcome: 'running', maxBytes: PAGE_BYTES / 5 }, scope),
      this.streams({ limit: 20, kind: 'run', outcome: 'stale', maxBytes: PAGE_BYTES / 5 }, scope),
      this.consumers({ limit: 50, maxBytes: PAGE_BYTES / 5 }, scope),
      this.rejections({ limit: 10, maxBytes: PAGE_BYTES / 5 }, scope),
      Promise.all(
        REFUSAL_TABLES.map((table) =>
          this.db.all(
            this.db.q
              .selectFrom(table)
              .select((eb) => eb.fn.countAll().as('n'))
              .where('status', '<>', 'checkpointed')
              .where('created_at', '>=', dayAgo)
              .where(producerScope('producer', scope.producers)),
          ),
        ),
      ).then((counts) => [{ n: counts.reduce((sum, [row]) => sum + Number(row?.n ?? 0), 0) }]),
      this.newest(scope.assets),
    ]);
    return {
      assets,
      running,
      stale,
      staleRunAfterMs: this.staleRunAfterMs,
      consumers,
      rejections: { lastDay: Number(lastDay?.n ?? 0), recent: recent.items },
      newestCursor: newestCursor ?? 0,
      at: at.toISOString(),
    };
  }

  /** Notes that a consumer group read events now (its last fetch). */
  async noteFetch(producer: string, group: string, at: Date): Promise<void> {
    await this.db.all(
      this.db.q.updateTable('streams').set({ fetched_at: at.toISOString() }).where('producer', '=', producer).where('run_id', '=', group).where('task', '=', ''),
    );
  }

  /** The counts brought up to the newest event, one rollup at a time on this instance. */
  private async ready(): Promise<void> {
    this.rollup ??= advanceRollup(this.db).finally(() => {
      this.rollup = undefined;
    });
    await this.rollup;
  }

  private async summaries(names: readonly string[]): Promise<AssetSummary[]> {
    if (names.length === 0) return [];
    const { q } = this.db;
    const list = [...names];
    const [counts, registered, lastEvents] = await Promise.all([
      this.db.all(q.selectFrom('asset_rollup').selectAll().where('asset', 'in', list)),
      this.db.all(q.selectFrom('assets').select('name').where('name', 'in', list)),
      Promise.all(
        list.map((name) =>
          this.db.all(q.selectFrom('events').select(EVENT_REF_COLUMNS).where('asset', '=', name).where('cursor', 'is not', null).orderBy('cursor', 'desc').limit(1)),
        ),
      ),
    ]);
    const countOf = new Map(counts.map((row) => [row.asset, row]));
    const known = new Set(registered.map((row) => row.name));
    return list.map((name, i) => {
      const count = countOf.get(name);
      const last = lastEvents[i]![0];
      return {
        name,
        registered: known.has(name),
        events: Number(count?.events ?? 0),
        partitions: Number(count?.partitions ?? 0),
        duplicates: Number(count?.duplicates ?? 0),
        lastEvent: last ? toEventRef(last) : null,
      };
    });
  }

  /** Events by cursor, as references with their partition date. */
  private async eventsAt(cursors: readonly number[]): Promise<Map<number, { ref: EventRef; partitionDate: string | null }>> {
    if (cursors.length === 0) return new Map();
    const rows = await this.db.all(this.db.q.selectFrom('events').select([...EVENT_REF_COLUMNS, 'partition_date']).where('cursor', 'in', [...cursors]));
    return new Map(rows.map((row) => [Number(row.cursor), { ref: toEventRef(row), partitionDate: row.partition_date }]));
  }

  /** The newest event's cursor of these assets (of every asset for null); null when they have none. */
  private async newest(assets: readonly string[] | null): Promise<number | null> {
    const { q } = this.db;
    const select = q.selectFrom('events').select('cursor').where('cursor', 'is not', null).orderBy('cursor', 'desc').limit(1);
    // One index probe per asset: a max over `asset IN (…)` would scan.
    const newest = await Promise.all((assets ?? [null]).map((asset) => this.db.all(asset === null ? select : select.where('asset', '=', asset))));
    const cursors = newest.flat().map((row) => Number(row.cursor));
    return cursors.length === 0 ? null : Math.max(...cursors);
  }
}
