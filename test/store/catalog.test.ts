import { describe, expect, it } from 'vitest';
import type { Page } from '../../src/protocol/catalog.js';
import { outcomeKey } from '../../src/protocol/lifecycle.js';
import { item, newKey, post, STREAM } from '../support/http.js';
import { pgAvailable, pgSkipReason } from '../support/postgres.js';
import { startServer, type Backend, type RunningServer } from '../support/server.js';

/**
 * The catalog (GET /v1/catalog/…) on both stores, against a history with each thing it must show: a
 * retry absorbed as a duplicate, a zombie fenced, a partition published again by a re-run, a refusal, a
 * run that succeeded, a consumer group behind, and the counts after compaction.
 */
const BACKENDS: Backend[] = ['sqlite', 'postgres'];

async function get(url: string, path: string, token?: string) {
  const response = await fetch(`${url}${path}`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
  return { status: response.status, json: (await response.json()) as any };
}

/** Every item of a list, page by page (`limit` per page), as a client follows `next`. */
async function allPages<Item>(url: string, path: string, limit: number): Promise<Item[]> {
  const items: Item[] = [];
  let after: string | null = null;
  do {
    const separator = path.includes('?') ? '&' : '?';
    const { status, json } = await get(url, `${path}${separator}limit=${limit}${after === null ? '' : `&after=${encodeURIComponent(after)}`}`);
    expect(status).toBe(200);
    const page = json as Page<Item>;
    expect(page.items.length).toBeLessThanOrEqual(limit);
    items.push(...page.items);
    after = page.next;
  } while (after !== null);
  return items;
}

const attempt = (runId: string, n: number) => ({ ...STREAM, runId, attempt: n });
const send = (url: string, items: unknown[], stream: object) => post(`${url}/v1/emissions`, JSON.stringify({ stream, items }));
const statuses = (answer: { json: { results: { status: string }[] } }) => answer.json.results.map((result) => result.status);

/** The history every case reads: see the suite's comment. */
async function history(server: RunningServer) {
  const { url } = server;
  const keys = Array.from({ length: 4 }, () => newKey());
  expect(statuses(await send(url, [item(1, keys[0]!), item(2, keys[1]!), { seq: 3, key: newKey(), kind: 'checkpoint', name: 'backlog', value: { batch: 2 } }], attempt('r1', 1)))).toEqual([
    'accepted',
    'accepted',
    'checkpointed',
  ]);
  // Attempt 2 sends batch 2 again (absorbed) and batch 3; the zombie attempt 1 is fenced.
  expect(statuses(await send(url, [item(1, keys[1]!, { partitionKey: 'batch-2' }), item(2, keys[2]!, { partitionKey: 'batch-3' })], attempt('r1', 2)))).toEqual([
    'duplicate',
    'accepted',
  ]);
  expect(statuses(await send(url, [item(4, newKey(), { partitionKey: 'batch-4' })], attempt('r1', 1)))).toEqual(['fenced']);
  // A re-run publishes batch 1 again under a new key, is refused an unregistered asset, and succeeds.
  const succeeded = { outcome: 'succeeded', workflow: STREAM.workflow, runId: 'r2', task: null };
  expect(
    statuses(
      await send(
        url,
        [item(1, keys[3]!, { partitionKey: 'batch-1' }), item(2, newKey(), { asset: 'never_registered', partitionKey: 'x' }), { seq: 3, key: outcomeKey(STREAM.producer, succeeded, 'succeeded', 0), kind: 'event', asset: 'oncebox.run_succeeded', extra: succeeded }],
        attempt('r2', 1),
      ),
    ),
  ).toEqual(['accepted', 'rejected', 'accepted']);
  // A consumer group that has consumed the first two events, of batch_ready only.
  const group = { producer: 'summariser', workflow: 'oncebox.consumer', runId: 'summariser', task: null, attempt: 1 };
  const checkpoint = (seq: number, name: string, value: unknown) => ({ seq, key: newKey(), kind: 'checkpoint', name, value });
  expect(statuses(await send(url, [checkpoint(1, 'oncebox.assets', ['batch_ready']), checkpoint(2, 'oncebox.cursor', 2)], group))).toEqual(['checkpointed', 'checkpointed']);
}

for (const backend of BACKENDS) {
  describe.skipIf(backend === 'postgres' && !pgAvailable)(`catalog: ${backend}${backend === 'postgres' ? pgSkipReason : ''}`, () => {
    it('lists assets with their counts, and an asset\'s partitions with their state and newest event', async () => {
      const server = await startServer({ backend });
      await history(server);
      const assets = await allPages<any>(server.url, '/v1/catalog/assets', 1);
      expect(assets.map((asset) => asset.name)).toEqual(['batch_ready', 'oncebox.run_succeeded', 'run_done']);
      expect(assets[0]).toMatchObject({ registered: true, events: 4, partitions: 3, duplicates: 1, lastEvent: { runId: 'r2', attempt: 1 } });
      expect(assets[1]).toMatchObject({ registered: false, events: 1, partitions: 0, duplicates: 0 });
      expect(assets[2]).toMatchObject({ registered: true, events: 0, partitions: 0, lastEvent: null });

      const partitions = await allPages<any>(server.url, '/v1/catalog/assets/batch_ready/partitions', 2);
      expect(partitions.map((p) => [p.partitionKey, p.state, p.events, p.duplicates, p.event.runId, p.event.attempt])).toEqual([
        ['batch-1', 'republished', 2, 0, 'r2', 1],
        ['batch-2', 'deduplicated', 1, 1, 'r1', 1],
        ['batch-3', 'published', 1, 0, 'r1', 2],
      ]);
      const page = await get(server.url, '/v1/catalog/assets/batch_ready/partitions?prefix=batch-3');
      expect(page.json).toMatchObject({ asset: { name: 'batch_ready', events: 4 }, items: [{ partitionKey: 'batch-3' }], next: null });
      // The counts follow new events, and a partition is counted once however often it is published.
      expect(statuses(await send(server.url, [item(4, newKey(), { partitionKey: 'batch-9' }), item(5, newKey(), { partitionKey: 'batch-9' })], attempt('r2', 1)))).toEqual([
        'accepted',
        'accepted',
      ]);
      expect((await get(server.url, '/v1/catalog/assets?prefix=batch')).json.items).toEqual([expect.objectContaining({ name: 'batch_ready', events: 6, partitions: 4 })]);
    });

    it('lists streams with their attempts, the zombie fenced, the retry absorbed and the outcome; one stream whole', async () => {
      const server = await startServer({ backend });
      await history(server);
      const streams = await allPages<any>(server.url, '/v1/catalog/streams', 1);
      expect(streams.map((stream) => [stream.runId, stream.kind, stream.outcome])).toEqual([
        ['summariser', 'consumer', 'running'],
        ['r2', 'run', 'succeeded'],
        ['r1', 'run', 'running'],
      ]);
      const r1 = streams[2];
      expect(r1).toMatchObject({ epoch: 2, lastSeq: 2, fencedAttempts: [1], duplicates: 1, checkpoints: { backlog: { batch: 2 } } });
      expect(r1.attempts).toEqual([
        expect.objectContaining({ attempt: 1, lastSeq: 3, duplicates: 0, fencedItems: 1, fencedBy: 2, firstAt: expect.any(String) }),
        expect.objectContaining({ attempt: 2, lastSeq: 2, duplicates: 1, fencedItems: 0, fencedBy: null }),
      ]);
      expect((await get(server.url, '/v1/catalog/streams?kind=run&outcome=running')).json.items.map((s: any) => s.runId)).toEqual(['r1']);
      expect((await get(server.url, '/v1/catalog/streams?outcome=succeeded')).json.items.map((s: any) => s.runId)).toEqual(['r2']);
      expect((await get(server.url, '/v1/catalog/streams?producer=nobody')).json).toEqual({ items: [], next: null });

      const r2 = await get(server.url, '/v1/catalog/streams/p/r2');
      expect(r2.status).toBe(200);
      expect(r2.json.lifecycle.map((event: any) => event.asset)).toEqual(['oncebox.run_succeeded']);
      expect(r2.json.rejections).toEqual([expect.objectContaining({ code: 'unknown_asset', asset: 'never_registered', partitionKey: 'x', seq: 2 })]);
      expect((await get(server.url, '/v1/catalog/streams/p/nope')).status).toBe(404);
    });

    it('shows a run with no end and no request for the stale time as stale, and running again once it makes one', async () => {
      let clock = Date.parse('2026-12-01T00:00:00Z');
      const server = await startServer({ backend, now: () => new Date(clock), staleRunAfterMs: 3600_000 });
      const { url } = server;
      const retrying = { outcome: 'failed', workflow: STREAM.workflow, runId: 'r8', task: null, attempt: 1, willRetry: true, held: 0, error: { message: 'flaky' } };
      expect(statuses(await send(url, [item(1, newKey())], attempt('r7', 1)))).toEqual(['accepted']);
      expect(statuses(await send(url, [{ seq: 1, key: outcomeKey(STREAM.producer, retrying, 'failed', 1), kind: 'event', asset: 'oncebox.run_failed', extra: retrying }], attempt('r8', 1)))).toEqual(['accepted']);
      const done = { outcome: 'succeeded', workflow: STREAM.workflow, runId: 'r9', task: null };
      expect(statuses(await send(url, [{ seq: 1, key: outcomeKey(STREAM.producer, done, 'succeeded', 0), kind: 'event', asset: 'oncebox.run_succeeded', extra: done }], attempt('r9', 1)))).toEqual(['accepted']);
      const outcomes = async (query = '') => Object.fromEntries((await get(url, `/v1/catalog/streams${query}`)).json.items.map((s: any) => [s.runId, s.outcome]));
      expect(await outcomes()).toEqual({ r7: 'running', r8: 'running', r9: 'succeeded' });
      // One minute short of the stale time: still running.
      clock += 59 * 60_000;
      expect(await outcomes('?outcome=stale')).toEqual({});
      // Past it: the run without an end and the retry that never came are stale; an ended run stays ended.
      clock += 2 * 60_000;
      expect(await outcomes()).toEqual({ r7: 'stale', r8: 'stale', r9: 'succeeded' });
      expect(await outcomes('?outcome=stale')).toEqual({ r7: 'stale', r8: 'stale' });
      expect(await outcomes('?outcome=running')).toEqual({});
      const overview = (await get(url, '/v1/catalog')).json;
      expect(overview.stale.items.map((s: any) => s.runId).sort()).toEqual(['r7', 'r8']);
      expect([overview.running.items, overview.staleRunAfterMs]).toEqual([[], 3600_000]);
      expect((await get(url, '/v1/catalog/streams/p/r8')).json).toMatchObject({ outcome: 'stale', willRetry: true });
      // The run's job was alive after all: its next request makes it running again.
      expect(statuses(await send(url, [item(2, newKey())], attempt('r7', 1)))).toEqual(['accepted']);
      expect(await outcomes('?outcome=running')).toEqual({ r7: 'running' });
    });

    it("keeps a run's failure through the requests that follow it: a lost answer's re-send, a later commit", async () => {
      const server = await startServer({ backend });
      const { url } = server;
      const failed = { outcome: 'failed', workflow: STREAM.workflow, runId: 'r3', task: null, attempt: 1, willRetry: false, held: 0, error: { message: 'boom' } };
      const failure = [item(1, newKey()), { seq: 2, key: outcomeKey(STREAM.producer, failed, 'failed', 1), kind: 'event', asset: 'oncebox.run_failed', extra: failed }];
      expect(statuses(await send(url, failure, attempt('r3', 1)))).toEqual(['accepted', 'accepted']);
      const outcome = async () => (await get(url, '/v1/catalog/streams?kind=run')).json.items.find((s: any) => s.runId === 'r3')?.outcome;
      expect(await outcome()).toBe('failed');
      // The relay did not hear the answer and sends the request again: nothing new, the failure stands.
      expect(statuses(await send(url, failure, attempt('r3', 1)))).toEqual(['duplicate', 'duplicate']);
      expect(await outcome()).toBe('failed');
      // A commit after it with no lifecycle event (a checkpoint) does not make the run look running again.
      expect(statuses(await send(url, [{ seq: 3, key: newKey(), kind: 'checkpoint', name: 'after', value: 1 }], attempt('r3', 1)))).toEqual(['checkpointed']);
      expect(await outcome()).toBe('failed');
      expect((await get(url, '/v1/catalog/streams?outcome=failed')).json.items.map((s: any) => s.runId)).toEqual(['r3']);
    });

    it("keeps the outcome a later attempt said when an earlier attempt's failure arrives after it (a dead row sent again)", async () => {
      const server = await startServer({ backend });
      const { url } = server;
      const failure = (runId: string, attempt: number, willRetry: boolean) => {
        const extra = { outcome: 'failed', workflow: STREAM.workflow, runId, task: null, attempt, willRetry, held: 0, error: { message: `attempt ${attempt}` } };
        return { key: outcomeKey(STREAM.producer, extra, 'failed', attempt), kind: 'event', asset: 'oncebox.run_failed', extra };
      };
      const outcome = async () => (await get(url, '/v1/catalog/streams/p/r4')).json;
      expect(statuses(await send(url, [{ seq: 1, ...failure('r4', 2, true) }, { seq: 2, ...failure('r4', 1, false) }], attempt('r4', 2)))).toEqual(['accepted', 'accepted']);
      expect(await outcome()).toMatchObject({ outcome: 'running', willRetry: true });
      // The same in two requests: the store keeps the later attempt's word.
      expect(statuses(await send(url, [{ seq: 1, ...failure('r6', 2, true) }], attempt('r6', 2)))).toEqual(['accepted']);
      expect(statuses(await send(url, [{ seq: 2, ...failure('r6', 1, false) }], attempt('r6', 2)))).toEqual(['accepted']);
      expect((await get(url, '/v1/catalog/streams/p/r6')).json).toMatchObject({ outcome: 'running', willRetry: true });
      // The other way round, attempt 1's word is overwritten by attempt 2's.
      expect(statuses(await send(url, [{ seq: 1, ...failure('r5', 1, false) }, { seq: 2, ...failure('r5', 2, true) }], attempt('r5', 2)))).toEqual(['accepted', 'accepted']);
      expect((await get(url, '/v1/catalog/streams/p/r5')).json).toMatchObject({ outcome: 'running', willRetry: true });
    });

    it('lists every refusal a relay parks: sequence_reused and attempt_too_high too, once each however often sent', async () => {
      const server = await startServer({ backend });
      const { url } = server;
      const taken = item(1, newKey(), { partitionKey: 'first' });
      expect(statuses(await send(url, [taken], attempt('r7', 1)))).toEqual(['accepted']);
      // Another key at the taken position, sent twice (the relay retries a lost answer): one refusal.
      const reused = item(1, newKey(), { partitionKey: 'second' });
      for (let i = 0; i < 2; i++) expect(statuses(await send(url, [reused], attempt('r7', 1)))).toEqual(['rejected']);
      // A request of an attempt far past the run's: refused whole, no position taken.
      const far = item(1, newKey(), { partitionKey: 'far' });
      expect(statuses(await send(url, [far], attempt('r8', 5000)))).toEqual(['rejected']);
      const listed = (await get(url, '/v1/catalog/rejections')).json.items;
      expect(listed.map((r: any) => [r.runId, r.code, r.partitionKey, r.seq])).toEqual(
        expect.arrayContaining([
          ['r7', 'sequence_reused', 'second', 1],
          ['r8', 'attempt_too_high', 'far', 1],
        ]),
      );
      expect(listed).toHaveLength(2);
      expect((await get(url, '/v1/catalog/rejections?code=sequence_reused')).json.items.map((r: any) => r.key)).toEqual([reused.key]);
      expect((await get(url, '/v1/catalog/rejections?code=attempt_too_high')).json.items.map((r: any) => r.key)).toEqual([far.key]);
      expect((await get(url, '/v1/catalog/streams/p/r7')).json.rejections.map((r: any) => r.code)).toEqual(['sequence_reused']);
      expect((await get(url, '/v1/catalog')).json.rejections.lastDay).toBe(2);
      // Paged one at a time, each once.
      expect((await allPages<any>(url, '/v1/catalog/rejections', 1)).map((r: any) => r.key).sort()).toEqual([reused.key, far.key].sort());
    });

    it('pages the refusals in one order, each once, however their names sort and however many share a time', async () => {
      const at = new Date('2026-06-01T00:00:00Z');
      const { url } = await startServer({ backend, now: () => at });
      const keys: string[] = [];
      for (const [i, runId] of ['r-ｚ', 'r-😀', 'r-ａ', 'r-💩', 'B', 'a', 'r-Z', 'r-z'].entries()) {
        const key = newKey();
        keys.push(key);
        // Refusals of both kinds, so that the two tables' lists are merged: one at its position, one beside.
        if (i % 2 === 0) expect(statuses(await send(url, [item(1, key, { asset: 'never_registered' })], attempt(runId, 1)))).toEqual(['rejected']);
        else expect(statuses(await send(url, [item(1, key)], attempt(runId, 5000)))).toEqual(['rejected']);
      }
      for (const limit of [1, 2, 3]) expect((await allPages<any>(url, '/v1/catalog/rejections', limit)).map((r: any) => r.key).sort()).toEqual([...keys].sort());
      // A forged page cursor past what a store keeps is refused as malformed, not a 5xx.
      const forged = Buffer.from(JSON.stringify([0, 'p', 'r', '', 2 ** 31, 1, 'k', 'c'])).toString('base64url');
      expect((await get(url, `/v1/catalog/rejections?after=${forged}`)).status).toBe(400);
    });

    it('lists consumer groups with their lag, and the refusals with the fix of each', async () => {
      const server = await startServer({ backend });
      await history(server);
      const consumers = await get(server.url, '/v1/catalog/consumers');
      expect(consumers.json.items).toEqual([
        expect.objectContaining({ producer: 'summariser', group: 'summariser', cursor: 2, assets: ['batch_ready'], lag: 2, lagCapped: false, lastFetchAt: null }),
      ]);
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      expect(metrics).toContain('oncebox_consumer_lag_events{producer="summariser",group="summariser"} 2');
      // A read that names the group is its last fetch.
      await get(server.url, '/v1/events?after=2&group=summariser');
      expect((await get(server.url, '/v1/catalog/consumers')).json.items[0].lastFetchAt).toEqual(expect.any(String));

      const rejections = await get(server.url, '/v1/catalog/rejections');
      expect(rejections.json.items).toEqual([
        expect.objectContaining({ producer: 'p', runId: 'r2', status: 'rejected', code: 'unknown_asset', asset: 'never_registered', fix: expect.stringContaining('PUT /v1/assets/never_registered') }),
      ]);
      expect((await get(server.url, '/v1/catalog/rejections?code=key_conflict')).json.items).toEqual([]);
      expect((await get(server.url, `/v1/catalog/rejections?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`)).json.items).toEqual([]);

      const overview = await get(server.url, '/v1/catalog');
      expect(overview.json).toMatchObject({ rejections: { lastDay: 1 }, running: { items: [{ runId: 'r1' }] }, consumers: { items: [{ lag: 2 }] } });
    });

    it('refuses a page cursor it did not give and malformed filters with 400, never 5xx', async () => {
      const server = await startServer({ backend });
      await history(server);
      for (const path of [
        '/v1/catalog/assets?after=nonsense',
        '/v1/catalog/streams?after=WyJhIl0',
        '/v1/catalog/assets?limit=0',
        '/v1/catalog/assets?limit=1e3',
        '/v1/catalog/streams?outcome=done',
        '/v1/catalog/rejections?code=nope',
        '/v1/catalog/rejections?since=yesterday',
        '/v1/catalog/consumers?limt=3',
        '/v1/catalog?limit=5',
        // Text a store cannot hold, and forged page keys of the right shape with such text or with
        // numbers past exact integers: PostgreSQL would refuse them in the query, as a 500.
        '/v1/catalog/assets?prefix=%00',
        '/v1/catalog/assets/batch_ready/partitions?prefix=%00',
        `/v1/catalog/assets?after=${cursor(['\u0000'])}`,
        `/v1/catalog/consumers?after=${cursor(['\u0000', 'x'])}`,
        `/v1/catalog/streams?after=${cursor(['2026-01-01T00:00:00Z', '\u0000', 'b', 'c'])}`,
        `/v1/catalog/rejections?after=${cursor([1.5, 'a', 'b', 'c', 1, 1])}`,
        `/v1/catalog/rejections?after=${cursor([1e308, 'a', 'b', 'c', 1, 1])}`,
      ]) {
        const answer = await get(server.url, path);
        expect(answer.status, path).toBe(400);
        expect(answer.json.code, path).toBe('invalid_request');
      }
      expect((await get(server.url, '/v1/catalog/assets/nope/partitions')).status).toBe(404);
      // A time with an offset, or none (UTC), is a time.
      for (const since of ['2026-12-01T00:00:00%2B02:00', '2026-12-01T00:00:00']) expect((await get(server.url, `/v1/catalog/rejections?since=${since}`)).status, since).toBe(200);
    });

    it('scopes every list by the token, as the reads it summarises', async () => {
      const server = await startServer({ backend, tokenCacheMs: 0 });
      await history(server);
      const { store } = server.server;
      const admin = (await store.tokens.create({ scope: 'admin' })).token;
      const otherAssets = (await store.tokens.create({ scope: 'read', reads: ['events', 'streams'], assets: ['run_done'], producers: 'summ*' })).token;
      const eventsOnly = (await store.tokens.create({ scope: 'read', reads: ['events'] })).token;
      expect((await get(server.url, '/v1/catalog/assets', otherAssets)).json.items.map((a: any) => a.name)).toEqual(['run_done']);
      expect((await get(server.url, '/v1/catalog/assets/batch_ready/partitions', otherAssets)).status).toBe(403);
      expect((await get(server.url, '/v1/catalog/streams', otherAssets)).json.items.map((s: any) => s.runId)).toEqual(['summariser']);
      expect((await get(server.url, '/v1/catalog/rejections', otherAssets)).json.items).toEqual([]);
      // The group consumes batch_ready, whose events this token may not read: no count of them leaks.
      const [group] = (await get(server.url, '/v1/catalog/consumers', otherAssets)).json.items;
      expect(group).toMatchObject({ group: 'summariser', lag: null, newestCursor: null });
      expect((await get(server.url, '/v1/catalog/consumers', admin)).json.items[0].lag).toBeGreaterThan(0);
      // A token that reads streams and no events (its asset list names batch_ready, but it reads none of
      // their events) is shown the group, never a count over its assets: the lag moved with the cursor
      // would tell the cursor of every event it may not read.
      const streamsOnly = (await store.tokens.create({ scope: 'read', reads: ['streams'], assets: ['batch_ready'], producers: 'summ*' })).token;
      expect((await get(server.url, '/v1/catalog/consumers', streamsOnly)).json.items[0]).toMatchObject({ group: 'summariser', assets: ['batch_ready'], lag: null, newestCursor: null });
      expect((await get(server.url, '/v1/catalog', otherAssets)).json.consumers.items[0]).toMatchObject({ lag: null, newestCursor: null });
      // A token that reads events changes no group's state by naming it: only the group's consumer notes its fetch.
      await get(server.url, '/v1/events?after=0&group=summariser&groupProducer=summariser', eventsOnly);
      expect((await get(server.url, '/v1/catalog/consumers', admin)).json.items[0].lastFetchAt).toBeNull();
      expect((await get(server.url, '/v1/catalog/streams/p/r2', otherAssets)).status).toBe(403);
      expect((await get(server.url, '/v1/catalog/streams', eventsOnly)).status).toBe(403);
      expect((await get(server.url, '/v1/catalog', eventsOnly)).status).toBe(403);
      expect((await get(server.url, '/v1/catalog')).status).toBe(401);
      expect((await get(server.url, '/v1/catalog', admin)).status).toBe(200);
    });

    it('keeps the counts right across compaction: removed events are no longer counted', async () => {
      const DAY = 24 * 3600_000;
      let clock = Date.parse('2026-01-01T00:00:00Z');
      const server = await startServer({ backend, now: () => new Date(clock), eventRetentionMs: 10 * DAY, compactEveryMs: 0 });
      await send(server.url, [item(1, newKey(), { partitionKey: 'old' }), item(2, newKey(), { partitionKey: 'both' })], attempt('a', 1));
      // Counted before compaction (the rollup covers them), and one more after it.
      expect((await get(server.url, '/v1/catalog/assets?prefix=batch')).json.items[0]).toMatchObject({ events: 2, partitions: 2 });
      clock += 11 * DAY;
      await send(server.url, [item(1, newKey(), { partitionKey: 'both' })], attempt('b', 1));
      expect((await server.server.compact()).events).toBe(2);
      await send(server.url, [item(2, newKey(), { partitionKey: 'new' })], attempt('b', 1));
      expect((await get(server.url, '/v1/catalog/assets?prefix=batch')).json.items[0]).toMatchObject({ events: 2, partitions: 2 });
      expect((await allPages<any>(server.url, '/v1/catalog/assets/batch_ready/partitions', 10)).map((p) => [p.partitionKey, p.events])).toEqual([
        ['both', 1],
        ['new', 1],
      ]);
    });
  });
}

/** A page cursor as the server encodes one: a client can forge one of the right shape. */
function cursor(key: unknown[]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}
