import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { CATALOG_PAGE_ROWS, CHECKPOINT_PREVIEW_CHARS, CONSUMER_PAGE_ROWS, type Page } from '../../src/protocol/catalog.js';
import { Limits } from '../../src/protocol/limits.js';
import type { StoredEvent } from '../../src/protocol/wire.js';
import { newKey, post } from '../support/http.js';
import pg from 'pg';
import { CATALOG_CONNECTIONS } from '../../src/dedupe/postgres/store.js';
import { PG_URL, pgAvailable, pgSkipReason, testSchema } from '../support/postgres.js';
import { startServer, type Backend } from '../support/server.js';

/**
 * What a catalog read may cost, on both stores: a list a client wrote (a group's asset names) is held to a
 * bound where it is written, each group's lag is counted from marks, exactly, in a bounded number of index
 * entries whatever the backlog (100,000 events here), pages are bounded in rows and bytes, and the reads
 * run where they hold no publisher up.
 */
const BACKENDS: Backend[] = ['sqlite', 'postgres'];
const ASSETS = ['batch_ready', 'run_done', 'audit'];
const DAY = 24 * 3600_000;

async function get(url: string, path: string, token?: string) {
  const response = await fetch(`${url}${path}`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
  const text = await response.text();
  return { status: response.status, bytes: Buffer.byteLength(text), json: JSON.parse(text) as any };
}

const send = (url: string, stream: object, items: unknown[]) => post(`${url}/v1/emissions`, JSON.stringify({ stream, items }));
const stream = (producer: string, runId: string, attempt = 1) => ({ producer, workflow: producer === runId ? 'oncebox.consumer' : 'w', runId, task: null, attempt });
const checkpoint = (seq: number, name: string, value: unknown) => ({ seq, key: newKey(), kind: 'checkpoint', name, value });

/** `count` events, in requests of 1000, their assets in turn, from runs of 1000 events each. */
async function publish(url: string, count: number, from = 0): Promise<void> {
  for (let start = from; start < from + count; start += 1000) {
    const items = Array.from({ length: Math.min(1000, from + count - start) }, (_, i) => ({
      seq: i + 1,
      key: newKey(),
      kind: 'event',
      asset: ASSETS[(start + i) % ASSETS.length],
      partitionKey: `p-${start + i}`,
    }));
    const answer = await send(url, stream('loader', `run-${start}`), items);
    expect(answer.status).toBe(200);
  }
}

/** A consumer group as its consumer mirrors it: its asset names and its cursor. */
async function group(url: string, name: string, assets: string[], cursor: number): Promise<void> {
  const answer = await send(url, stream(name, name), [checkpoint(1, 'oncebox.assets', assets), checkpoint(2, 'oncebox.cursor', cursor)]);
  expect(answer.json.results.map((result: { status: string }) => result.status)).toEqual(['checkpointed', 'checkpointed']);
}

/** Every item of a list, following `next`. */
async function allPages<Item>(url: string, path: string, limit: number): Promise<Item[]> {
  const items: Item[] = [];
  let after: string | null = null;
  do {
    const page = (await get(url, `${path}${path.includes('?') ? '&' : '?'}limit=${limit}${after === null ? '' : `&after=${after}`}`)).json as Page<Item>;
    items.push(...page.items);
    after = page.next;
  } while (after !== null);
  return items;
}

/** The lag a recount from the stored events gives: events of `assets` after `cursor`. */
const recount = (events: readonly StoredEvent[], assets: readonly string[], cursor: number) => events.filter((event) => assets.includes(event.asset) && event.cursor > cursor).length;

for (const backend of BACKENDS) {
  describe.skipIf(backend === 'postgres' && !pgAvailable)(`catalog bounds: ${backend}${backend === 'postgres' ? pgSkipReason : ''}`, () => {
    it("keeps a group's asset list to its distinct names where it is written, and refuses one longer than a group may count", async () => {
      const { url } = await startServer({ backend, assets: ASSETS });
      // A publish token's consumer naming one asset a thousand times: one name stored, one count a read.
      await group(url, 'echo', Array.from({ length: 1000 }, () => 'batch_ready'), 0);
      const [echo] = (await get(url, '/v1/catalog/consumers')).json.items;
      expect(echo).toMatchObject({ group: 'echo', assets: ['batch_ready'] });
      // Kept so where it is written: what a fresh machine's consumer resumes from holds one name too.
      expect((await get(url, '/v1/streams/echo/echo')).json.checkpoints['oncebox.assets']).toEqual(['batch_ready']);
      // A cursor is a whole number of 0 or more: anything else is refused, and no list counts from it.
      for (const [i, cursor] of [3.5, -1, -1e20, 1e20, 'abc', {}, null].entries()) {
        const answer = await send(url, stream('odd', 'odd'), [checkpoint(i + 1, 'oncebox.cursor', cursor)]);
        expect({ cursor, result: answer.json.results[0] }).toMatchObject({ cursor, result: { status: 'rejected', code: 'invalid_item', field: 'items[0].value' } });
      }
      const tooMany = Array.from({ length: Limits.maxGroupAssets + 1 }, (_, i) => `asset_${i}`);
      const refused = await send(url, stream('wide', 'wide'), [checkpoint(1, 'oncebox.assets', tooMany)]);
      expect(refused.json.results[0]).toMatchObject({ status: 'rejected', code: 'invalid_item', field: 'items[0].value' });
      expect(refused.json.results[0].detail).toContain(`at most ${Limits.maxGroupAssets}`);
    });

    it('counts every group’s lag exactly on a store of 100,000 events, before and after retention removed the oldest', { timeout: 240_000 }, async () => {
      let clock = Date.parse('2026-01-01T00:00:00Z');
      const server = await startServer({ backend, assets: ASSETS, now: () => new Date(clock), eventRetentionMs: 10 * DAY, compactEveryMs: 0 });
      const { url } = server;
      await publish(url, 30_000);
      clock += 11 * DAY;
      await publish(url, 70_000, 30_000);
      const groups: [string, string[], number][] = [
        ['from-start', ['batch_ready'], 0],
        ['one-in', ['batch_ready', 'run_done'], 1],
        ['at-a-mark', ['run_done'], 64],
        ['past-a-mark', ['audit', 'run_done'], 65],
        ['halfway', ASSETS, 50_000],
        ['nearly', ['audit'], 99_999],
        ['caught-up', ASSETS, 100_000],
        ['every-asset', [...ASSETS, 'batch_ready'], 12_345],
      ];
      for (const [name, assets, cursor] of groups) await group(url, name, assets, cursor);
      const lags = async () => new Map((await allPages<any>(url, '/v1/catalog/consumers', 1000)).map((row) => [row.group, row.lag]));
      const expected = (events: readonly StoredEvent[]) => new Map(groups.map(([name, assets, cursor]) => [name, recount(events, assets, cursor)]));
      expect(await lags()).toEqual(expected(await server.events()));
      // Each asset's every 64th event is marked: a group's count starts at most 63 events before its cursor.
      if (backend === 'sqlite') {
        const db = new Database(server.dbPath, { readonly: true });
        const marks = db.prepare('SELECT asset, count(*) AS n, max(ordinal) AS top FROM asset_marks GROUP BY asset ORDER BY asset').all();
        db.close();
        const perAsset = 100_000 / ASSETS.length;
        expect(marks).toEqual(
          [...ASSETS].sort().map((asset) => ({ asset, n: Math.floor(Math.ceil(perAsset) / 64), top: Math.floor(Math.ceil(perAsset) / 64) * 64 })),
        );
      }
      // Retention removes the 30,000 oldest: a group behind them counts only what it can still read.
      expect((await server.server.compact()).events).toBe(30_000);
      await publish(url, 10, 100_000);
      const left = await server.events();
      expect(left).toHaveLength(70_010);
      expect(await lags()).toEqual(expected(left));
    });

    it("keeps a group's lag exact when a clock stepped back stamped a later event older: retention removes a prefix of the log", async () => {
      let clock = Date.parse('2026-01-10T00:00:00Z');
      const server = await startServer({ backend, assets: ASSETS, now: () => new Date(clock), eventRetentionMs: 10 * DAY, compactEveryMs: 0 });
      await publish(server.url, 100);
      // A clock stepped back five days: the next events are stamped older than the first.
      clock -= 5 * DAY;
      await publish(server.url, 50, 100);
      clock += 5 * DAY + 6 * DAY;
      for (const [name, cursor] of [['behind', 20], ['past-the-skew', 120]] as const) await group(server.url, name, ['batch_ready', 'run_done'], cursor);
      // The first event is inside retention: nothing before it goes, and nothing after it either.
      expect((await server.server.compact()).events).toBe(0);
      const events = await server.events();
      const lags = new Map((await get(server.url, '/v1/catalog/consumers')).json.items.map((row: any) => [row.group, row.lag]));
      expect(lags).toEqual(new Map([['behind', recount(events, ['batch_ready', 'run_done'], 20)], ['past-the-skew', recount(events, ['batch_ready', 'run_done'], 120)]]));
      // Once the first events are past retention too, they go, oldest first, with the older-stamped ones after them.
      clock += 5 * DAY;
      expect((await server.server.compact()).events).toBe(150);
    });

    it('lists a run whose attempts jumped by thousands in a bounded item, its duplicates all counted', async () => {
      const { url } = await startServer({ backend, assets: ASSETS });
      for (let attempt = 1; attempt <= 20_001; attempt += 1000) {
        const answer = await send(url, stream('jumpy', 'jumpy', attempt), [{ seq: 1, key: '00000000-0000-4000-8000-00000000beef', kind: 'event', asset: 'audit', partitionKey: 'once' }]);
        expect(answer.json.results[0].status).toMatch(/^(accepted|duplicate)$/);
      }
      const [item] = (await get(url, '/v1/catalog/streams?producer=jumpy')).json.items;
      expect(item.attempts.map((attempt: any) => attempt.attempt)).toEqual([20_001]);
      expect(item).toMatchObject({ epoch: 20_001, attemptsCut: true, duplicates: 20 });
      expect((await get(url, '/v1/catalog/streams/jumpy/jumpy')).json).toMatchObject({ attemptsCut: true, duplicates: 20 });
    });

    it('answers a list in pages bounded in rows and bytes, and shows a long checkpoint cut, whole on its stream’s page', { timeout: 240_000 }, async () => {
      const { url } = await startServer({ backend, assets: ASSETS });
      const big = { rows: 'x'.repeat(60_000) };
      for (let i = 0; i < 250; i++) {
        const answer = await send(url, stream('loader', `run-${String(i).padStart(3, '0')}`), [checkpoint(1, 'backlog', { batch: i }), checkpoint(2, 'blob', big)]);
        expect(answer.status).toBe(200);
      }
      const first = await get(url, '/v1/catalog/streams?limit=1000');
      expect(first.json.items.length).toBeLessThanOrEqual(CATALOG_PAGE_ROWS);
      expect(first.bytes).toBeLessThan(1.5 * 1024 * 1024);
      const [shown] = first.json.items;
      expect(shown.cutCheckpoints).toEqual(['blob']);
      expect(shown.checkpoints.blob).toHaveLength(CHECKPOINT_PREVIEW_CHARS + 1);
      expect(shown.checkpoints.blob.endsWith('…')).toBe(true);
      expect(shown.checkpoints.backlog).toEqual({ batch: expect.any(Number) });
      const whole = await get(url, `/v1/catalog/streams/loader/${shown.runId}`);
      expect(whole.json.checkpoints.blob).toEqual(big);
      expect(whole.json.cutCheckpoints).toEqual([]);
      // Following `next`, every stream once.
      const all = await allPages<any>(url, '/v1/catalog/streams', 1000);
      expect(new Set(all.map((row) => row.runId)).size).toBe(250);
      expect(all).toHaveLength(250);
      // Items of many long checkpoints each (a preview of 1,000 characters apiece): the page stops at 1 MiB.
      const long = { rows: 'y'.repeat(2000) };
      for (let i = 0; i < 60; i++) {
        const items = Array.from({ length: 40 }, (_, c) => checkpoint(c + 1, `c-${c}`, long));
        expect((await send(url, stream('wide', `wide-${i}`), items)).status).toBe(200);
      }
      const heavy = await get(url, '/v1/catalog/streams?producer=wide&limit=1000');
      expect(heavy.bytes).toBeLessThanOrEqual(1024 * 1024 + 64 * 1024);
      // Bytes as sent (UTF-8), not characters: three bytes a character here.
      const wide = { rows: '字'.repeat(2000) };
      for (let i = 0; i < 40; i++) {
        const items = Array.from({ length: 40 }, (_, c) => checkpoint(c + 1, `c-${c}`, wide));
        expect((await send(url, stream('cjk', `cjk-${i}`), items)).status).toBe(200);
      }
      expect((await get(url, '/v1/catalog/streams?producer=cjk&limit=1000')).bytes).toBeLessThanOrEqual(1024 * 1024 + 192 * 1024);
      expect(await allPages<any>(url, '/v1/catalog/streams?producer=cjk', 1000)).toHaveLength(40);
      expect(heavy.json.items.length).toBeLessThan(60);
      expect(heavy.json.next).not.toBeNull();
      expect(await allPages<any>(url, '/v1/catalog/streams?producer=wide', 1000)).toHaveLength(60);
      // Consumer groups, each with its counts, come fewer to a page.
      for (let i = 0; i < CONSUMER_PAGE_ROWS + 5; i++) await group(url, `g-${String(i).padStart(3, '0')}`, ['batch_ready'], 0);
      expect((await get(url, '/v1/catalog/consumers?limit=1000')).json.items).toHaveLength(CONSUMER_PAGE_ROWS);
      expect(await allPages<any>(url, '/v1/catalog/consumers', 1000)).toHaveLength(CONSUMER_PAGE_ROWS + 5);
    });
  });
}

describe('catalog reads beside publishing', () => {
  it('answers /healthz before catalog reads sent before it (SQLite: the reads run on a connection of their own, off the event loop)', { timeout: 240_000 }, async () => {
    const server = await startServer({ assets: ASSETS });
    await publish(server.url, 100_000);
    const done: string[] = [];
    // The costliest page there is to compute: every partition of an asset, grouped.
    const reads = Array.from({ length: 8 }, (_, i) =>
      get(server.url, `/v1/catalog/assets/batch_ready/partitions?limit=200&prefix=p-${i}`).then((answer) => {
        expect(answer.status).toBe(200);
        done.push('catalog');
      }),
    );
    const health = fetch(`${server.url}/healthz`).then((answer) => {
      expect(answer.status).toBe(200);
      done.push('healthz');
    });
    await Promise.all([...reads, health]);
    expect(done.indexOf('healthz')).toBeLessThan(done.length - 1);
    expect(done[0]).toBe('healthz');
  });

  it.skipIf(!pgAvailable)(`publishes beside 40 catalog reads of the costliest list (PostgreSQL: the catalog has connections of its own)${pgSkipReason}`, { timeout: 120_000 }, async () => {
    const schema = testSchema();
    const server = await startServer({ backend: 'postgres', assets: ASSETS, schema, tokenCacheMs: 0 });
    await publish(server.url, 100_000);
    // Forty readers, each with its own token, and a job with its own.
    const readers = await Promise.all(Array.from({ length: 40 }, () => server.server.store.tokens.create({ scope: 'read', reads: ['events', 'streams'] })));
    const job = (await server.server.store.tokens.create({ scope: 'publish', producers: 'late' })).token;
    const done: string[] = [];
    const reads = readers.map(({ token }, i) =>
      get(server.url, `/v1/catalog/assets/batch_ready/partitions?limit=200&prefix=p-${i % 10}`, token).then((answer) => {
        expect({ status: answer.status, detail: answer.json.detail }).toEqual({ status: 200, detail: undefined });
        done.push('catalog');
      }),
    );
    const published = post(
      `${server.url}/v1/emissions`,
      JSON.stringify({ stream: stream('late', 'late'), items: [{ seq: 1, key: newKey(), kind: 'event', asset: 'audit', partitionKey: 'x' }] }),
      { 'content-type': 'application/json', authorization: `Bearer ${job}` },
    ).then((answer) => {
      expect(answer.json.results[0].status).toBe('accepted');
      done.push('publish');
    });
    await Promise.all([...reads, published]);
    // On the pool the publisher uses, it would have waited for most of the reads queued before it.
    expect(done.indexOf('publish')).toBeLessThan(20);
    // The reads ran on the catalog's own connections, at most CATALOG_CONNECTIONS of them (still open, idle).
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    try {
      const { rows } = await client.query<{ name: string; n: number }>(
        'SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity WHERE application_name IN ($1, $2) GROUP BY application_name',
        [`oncebox catalog ${schema}`.slice(0, 63), `oncebox ${schema}`.slice(0, 63)],
      );
      const catalog = rows.find((row) => row.name.startsWith('oncebox catalog'))?.n ?? 0;
      expect(catalog).toBeGreaterThan(0);
      expect(catalog).toBeLessThanOrEqual(CATALOG_CONNECTIONS);
    } finally {
      await client.end();
    }
  });
});
