import { existsSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { TokenRequest } from '../../src/dedupe/tokens.js';
import { openOutbox } from '../../src/outbox/index.js';
import { outcomeKey } from '../../src/protocol/lifecycle.js';
import { item, newKey, rawRequest } from '../support/http.js';
import { RUN } from '../support/outbox.js';
import { PG_URL, pgAvailable, pgSkipReason } from '../support/postgres.js';
import { startServer, type Backend, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';
import { join } from 'node:path';

const PROBLEM = 'application/problem+json; charset=utf-8';
const VICTIM = { producer: 'victim', workflow: 'w', runId: 'r1', task: null, attempt: 1 };

async function call(url: string, method: string, target: string, token: string | undefined, body?: unknown) {
  const headers: Record<string, string> = {};
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  return rawRequest(url, method, target, body === undefined ? undefined : JSON.stringify(body), headers);
}

async function tokenFor(running: RunningServer, request: TokenRequest): Promise<string> {
  return (await running.server.store.tokens.create(request)).token;
}

/** Everything the store holds of one stream and its keys: an attack must leave all of it as it was. */
async function snapshot(running: RunningServer, producer: string) {
  const { store } = running.server;
  return {
    state: await store.streamState(producer, 'r1', null),
    events: (await store.listEvents({ after: 0, limit: 1000 })).events.filter((event) => event.producer === producer),
    assets: await store.listAssets(),
  };
}

const BACKENDS: Backend[] = ['sqlite', 'postgres'];

for (const backend of BACKENDS) {
  const skip = backend === 'postgres' && !pgAvailable;
  describe.skipIf(skip)(`scoped tokens: ${backend}${backend === 'postgres' ? pgSkipReason : ''}`, () => {
    it('lets each scope do what it grants and refuses the rest with 403 forbidden', async () => {
      const running = await startServer({ backend });
      const { url } = running;
      const tokens = {
        admin: await tokenFor(running, { scope: 'admin' }),
        publish: await tokenFor(running, { scope: 'publish', producers: 'victim' }),
        prefix: await tokenFor(running, { scope: 'publish', producers: 'vic*', assets: ['batch_ready'] }),
        other: await tokenFor(running, { scope: 'publish', producers: 'mallory' }),
        events: await tokenFor(running, { scope: 'read', reads: ['events'] }),
        eventsOfOne: await tokenFor(running, { scope: 'read', reads: ['events'], assets: ['run_done'] }),
        streams: await tokenFor(running, { scope: 'read', reads: ['streams'], producers: 'victim' }),
      };
      let seq = 0;
      const publish = () => ({ stream: VICTIM, items: [item(++seq, newKey())] });
      // [method, target, body, token name, expected status]
      const matrix: [string, string, (() => unknown) | undefined, keyof typeof tokens, number][] = [
        ['POST', '/v1/emissions', publish, 'admin', 200],
        ['POST', '/v1/emissions', publish, 'publish', 200],
        ['POST', '/v1/emissions', publish, 'prefix', 200],
        ['POST', '/v1/emissions', publish, 'other', 403],
        ['POST', '/v1/emissions', publish, 'events', 403],
        ['POST', '/v1/emissions', publish, 'streams', 403],
        ['GET', '/v1/events', undefined, 'admin', 200],
        ['GET', '/v1/events', undefined, 'events', 200],
        ['GET', '/v1/events?asset=run_done', undefined, 'eventsOfOne', 200],
        // Naming no asset, a token limited to some reads those (its page holds no other asset's event).
        ['GET', '/v1/events', undefined, 'eventsOfOne', 200],
        ['GET', '/v1/events?asset=batch_ready', undefined, 'eventsOfOne', 403],
        ['GET', '/v1/events', undefined, 'publish', 403],
        ['GET', '/v1/events', undefined, 'streams', 403],
        ['GET', '/v1/assets', undefined, 'events', 200],
        ['GET', '/v1/assets', undefined, 'publish', 403],
        ['GET', '/v1/streams/victim/r1', undefined, 'admin', 200],
        ['GET', '/v1/streams/victim/r1', undefined, 'publish', 200],
        ['GET', '/v1/streams/victim/r1', undefined, 'prefix', 200],
        ['GET', '/v1/streams/victim/r1', undefined, 'streams', 200],
        ['GET', '/v1/streams/victim/r1', undefined, 'other', 403],
        ['GET', '/v1/streams/victim/r1', undefined, 'events', 403],
        ['PUT', '/v1/assets/new_one', undefined, 'admin', 201],
        ['PUT', '/v1/assets/other_one', undefined, 'publish', 403],
        ['PUT', '/v1/assets/other_one', undefined, 'events', 403],
        ['GET', '/v1/tokens', undefined, 'admin', 200],
        ['GET', '/v1/tokens', undefined, 'publish', 403],
        ['POST', '/v1/tokens', () => ({ scope: 'admin' }), 'publish', 403],
        ['POST', '/v1/tokens', () => ({ scope: 'admin' }), 'events', 403],
        ['GET', '/v1/nothing-here', undefined, 'events', 404],
      ];
      // Every answer first, then one comparison: a failure shows the whole matrix.
      const answers = [];
      for (const [method, target, body, who] of matrix) {
        const answer = await call(url, method, target, tokens[who], body?.());
        answers.push({ request: `${method} ${target} with ${who}`, status: answer.status, problem: answer.status >= 400 ? `${answer.type} ${answer.json?.code}` : '' });
      }
      const problemOf = (status: number) => ({ 403: `${PROBLEM} forbidden`, 404: `${PROBLEM} not_found` })[status] ?? '';
      expect(answers).toEqual(matrix.map(([method, target, , who, status]) => ({ request: `${method} ${target} with ${who}`, status, problem: problemOf(status) })));
      expect(await running.server.store.listAssets()).toEqual(['batch_ready', 'new_one', 'run_done']);
    });

    it('refuses every cross-producer attack with 403 and leaves the victim as it was', async () => {
      const running = await startServer({ backend });
      const { url } = running;
      const victimToken = await tokenFor(running, { scope: 'publish', producers: 'victim' });
      const mallory = await tokenFor(running, { scope: 'publish', producers: 'mallory' });
      const nextKey = newKey();
      const delivered = await call(url, 'POST', '/v1/emissions', victimToken, {
        stream: VICTIM,
        items: [item(1, newKey()), { seq: 2, key: newKey(), kind: 'checkpoint', name: 'progress', value: { batch: 1 } }],
      });
      expect(delivered.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'checkpointed']);
      const before = await snapshot(running, 'victim');

      const attacks = {
        fence: { stream: { ...VICTIM, attempt: 1000 }, items: [item(3, newKey())] },
        'overwrite the checkpoint': {
          stream: { ...VICTIM, attempt: 2 },
          items: [{ seq: 1, key: newKey(), kind: 'checkpoint', name: 'progress', value: { batch: 99 } }],
        },
        'squat the next key': { stream: VICTIM, items: [item(3, nextKey, { partitionKey: 'forged' })] },
      };
      for (const [what, body] of Object.entries(attacks)) {
        const answer = await call(url, 'POST', '/v1/emissions', mallory, body);
        expect({ what, status: answer.status, code: answer.json?.code, field: answer.json?.field }).toEqual({
          what,
          status: 403,
          code: 'forbidden',
          field: 'stream.producer',
        });
      }
      expect((await call(url, 'GET', '/v1/streams/victim/r1', mallory)).status).toBe(403);
      expect((await call(url, 'GET', '/v1/events', mallory)).status).toBe(403);
      expect((await call(url, 'PUT', '/v1/assets/mallorys', mallory)).status).toBe(403);
      // Under its own name, the key squats nothing: keys are scoped by producer.
      const own = await call(url, 'POST', '/v1/emissions', mallory, {
        stream: { ...VICTIM, producer: 'mallory' },
        items: [item(1, nextKey, { partitionKey: 'forged' })],
      });
      expect(own.json.results[0].status).toBe('accepted');

      expect(await snapshot(running, 'victim')).toEqual(before);
      // The victim's own next emission, with the key mallory used, goes in as its own.
      const next = await call(url, 'POST', '/v1/emissions', victimToken, { stream: VICTIM, items: [item(3, nextKey)] });
      expect(next.json.results[0]).toMatchObject({ status: 'accepted', seq: 3 });
      expect((await running.server.store.streamState('victim', 'r1', null))?.checkpoints).toEqual({ progress: { batch: 1 } });
    });

    it('refuses, item by item, an event to an asset the publish token does not list', async () => {
      const running = await startServer({ backend });
      const token = await tokenFor(running, { scope: 'publish', producers: 'victim', assets: ['batch_ready'] });
      const body = { stream: VICTIM, items: [item(1, newKey()), item(2, newKey(), { asset: 'run_done' }), item(3, newKey())] };
      const first = await call(running.url, 'POST', '/v1/emissions', token, body);
      expect(first.json.results.map((r: { status: string; code?: string }) => r.code ?? r.status)).toEqual(['accepted', 'forbidden', 'accepted']);
      expect(first.json.results[1]).toMatchObject({ field: 'asset', detail: expect.stringMatching(/may not publish to "run_done" \(it may publish to batch_ready\)/) });
      // A retry gets the same answers.
      const again = await call(running.url, 'POST', '/v1/emissions', token, body);
      expect(again.json.results.map((r: { status: string; code?: string }) => r.code ?? r.status)).toEqual(['duplicate', 'forbidden', 'duplicate']);
      expect((await running.server.store.listEvents({ after: 0, limit: 10 })).events.map((e) => e.seq)).toEqual([1, 3]);
      // A token of many assets is named in refusals by its first eight and a count, however many it lists.
      const many = Array.from({ length: 300 }, (_, i) => `asset_${String(i).padStart(3, '0')}_${'x'.repeat(100)}`);
      const wide = await tokenFor(running, { scope: 'publish', producers: 'victim', assets: many, consumes: many });
      const refused = await call(running.url, 'POST', '/v1/emissions', wide, { stream: { ...VICTIM, runId: 'r2' }, items: [item(1, newKey(), { asset: 'run_done' })] });
      expect(refused.json.results[0].detail).toMatch(/\(it may publish to asset_000_x+… \(\d+ characters\), .* and 292 more\)/);
      expect(refused.json.results[0].detail.length).toBeLessThan(1200);
      const reader = await tokenFor(running, { scope: 'read', reads: ['events'], assets: many });
      const wrongAsset = await call(running.url, 'GET', '/v1/events?asset=run_done', reader);
      expect({ status: wrongAsset.status, long: wrongAsset.json.detail.length > 1200 }).toEqual({ status: 403, long: false });
      expect(wrongAsset.json.detail).toContain('and 292 more');
      const outOfScope = await call(running.url, 'GET', '/v1/tokens', wide);
      expect({ status: outOfScope.status, long: outOfScope.json.detail.length > 2000 }).toEqual({ status: 403, long: false });
    });

    it("takes a lifecycle event outside the token's asset list only when it tells exactly its own stream's outcome", async () => {
      const running = await startServer({ backend });
      const token = await tokenFor(running, { scope: 'publish', producers: 'victim', assets: ['batch_ready'] });
      const run = { workflow: 'w', runId: 'r1', task: null };
      // Each under the key its producer derives for its outcome and attempt, unless a test says otherwise.
      const lifecycle = (seq: number, asset: string, extra: { outcome: 'succeeded' | 'failed' | 'fenced'; runId?: string; attempt?: number; [more: string]: unknown }, key?: string) => ({
        seq,
        key: key ?? outcomeKey('victim', { ...run, ...extra }, extra.outcome, extra.attempt ?? 0),
        kind: 'event',
        asset,
        extra,
      });
      const answer = await call(running.url, 'POST', '/v1/emissions', token, {
        stream: VICTIM,
        items: [
          lifecycle(1, 'oncebox.run_succeeded', { outcome: 'succeeded', ...run }),
          // Another run's success, forged through this stream: refused.
          lifecycle(2, 'oncebox.run_succeeded', { outcome: 'succeeded', ...run, runId: 'someone-elses' }),
          lifecycle(3, 'oncebox.run_failed', { outcome: 'failed', ...run, attempt: 7, error: { message: 'x' }, willRetry: false, held: 0 }),
          lifecycle(4, 'oncebox.run_failed', { outcome: 'failed', ...run, attempt: 1, error: { message: 'x' }, willRetry: false, held: 0, notes: 'a'.repeat(50_000) }),
          lifecycle(5, 'oncebox.run_fenced', { outcome: 'fenced', ...run, attempt: 1, fencedBy: 1 }),
          lifecycle(6, 'oncebox.run_failed', { outcome: 'failed', ...run, attempt: 1, error: { message: 'disk full' }, willRetry: true, held: 2 }),
          // A fence by a later attempt than the stream's: what a zombie would forge of the live attempt.
          lifecycle(7, 'oncebox.run_fenced', { outcome: 'fenced', ...run, attempt: 1, fencedBy: 2 }),
          // A true failure of its own attempt under the key of the run's success (or of a later attempt's
          // failure): stored, it would hold that key, and the real success would conflict with it for good.
          lifecycle(8, 'oncebox.run_failed', { outcome: 'failed', ...run, attempt: 1, error: { message: 'x' }, willRetry: true, held: 0 }, outcomeKey('victim', run, 'succeeded', 0)),
          lifecycle(9, 'oncebox.run_failed', { outcome: 'failed', ...run, attempt: 1, error: { message: 'x' }, willRetry: true, held: 0 }, newKey()),
        ],
      });
      expect(answer.json.results.map((r: { status: string; field?: string }) => (r.status === 'rejected' ? `rejected ${r.field}` : r.status))).toEqual([
        'accepted',
        'rejected extra',
        'rejected extra.attempt',
        'rejected extra.notes',
        'rejected extra.fencedBy',
        'accepted',
        'rejected extra.fencedBy',
        'rejected key',
        'rejected key',
      ]);
      const stored = await running.server.store.listEvents({ after: 0, limit: 10 });
      expect(stored.events.map((event) => event.asset)).toEqual(['oncebox.run_succeeded', 'oncebox.run_failed']);
    });

    it("shows a read token limited to assets only those assets, and no stream state unless it names whose", async () => {
      const running = await startServer({ backend });
      const victim = await tokenFor(running, { scope: 'publish', producers: 'victim' });
      await call(running.url, 'POST', '/v1/emissions', victim, { stream: VICTIM, items: [item(1, newKey()), { seq: 2, key: newKey(), kind: 'checkpoint', name: 'secret', value: { v: 1 } }] });
      const assetsOnly = await tokenFor(running, { scope: 'read', assets: ['run_done'] });
      expect((await call(running.url, 'GET', '/v1/streams/victim/r1', assetsOnly)).status).toBe(403);
      expect((await call(running.url, 'GET', '/v1/assets', assetsOnly)).json).toEqual({ assets: ['run_done'] });
      const everything = await tokenFor(running, { scope: 'read' });
      expect((await call(running.url, 'GET', '/v1/assets', everything)).json).toEqual({ assets: ['batch_ready', 'run_done'] });
      expect((await call(running.url, 'GET', '/v1/streams/victim/r1', everything)).status).toBe(200);
      // Any id for revoking: checked before the store sees it, never a 500.
      const admin = await tokenFor(running, { scope: 'admin' });
      for (const id of ['%00', 'x'.repeat(100), '0123456789ABCDEF', '..']) {
        const answer = await call(running.url, 'DELETE', `/v1/tokens/${id}`, admin);
        expect({ id, status: answer.status, code: answer.json?.code }).toEqual({ id, status: 400, code: 'invalid_request' });
      }
      expect((await call(running.url, 'DELETE', '/v1/tokens/0123456789abcdef', admin)).status).toBe(404);
    });

    it('keeps only a hash of each token, and a revoked token is refused', async () => {
      const running = await startServer({ backend, tokenCacheMs: 0 });
      const { token, info } = await running.server.store.tokens.create({ scope: 'read', note: 'dashboards' });
      // The secret is what follows the id (base64url, which may itself hold '_').
      const secret = token.slice(`obx_${info.id}_`.length);
      expect(secret).toHaveLength(43);
      const stored = backend === 'sqlite' ? sqliteBytes(running.dbPath) : await dumpTokens(running);
      expect(stored).toContain(info.id);
      expect(stored).not.toContain(secret);
      expect((await call(running.url, 'GET', '/v1/events', token)).status).toBe(200);

      const admin = await tokenFor(running, { scope: 'admin' });
      const revoked = await call(running.url, 'DELETE', `/v1/tokens/${info.id}`, admin);
      expect(revoked.json).toMatchObject({ id: info.id, revokedAt: expect.any(String) });
      const refused = await call(running.url, 'GET', '/v1/events', token);
      expect({ status: refused.status, code: refused.json.code }).toEqual({ status: 401, code: 'unauthorized' });
      expect(JSON.stringify(refused.json)).not.toContain(secret);
      // Revoking every token does not open the server.
      await running.server.store.tokens.revoke(admin.split('_')[1]!);
      expect((await call(running.url, 'GET', '/v1/events', undefined)).status).toBe(401);
      expect((await call(running.url, 'DELETE', '/v1/tokens/0000000000000000', admin)).status).toBe(401);
    });
  });
}

/** The database file and its write-ahead log, where recent writes are until a checkpoint. */
function sqliteBytes(path: string): string {
  return [path, `${path}-wal`].map((file) => (existsSync(file) ? readFileSync(file).toString('latin1') : '')).join('');
}

async function dumpTokens(running: RunningServer): Promise<string> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    const schema = (running.server.store as unknown as { schema: string }).schema;
    const rows = await client.query(`SELECT * FROM "${schema}".tokens`);
    return JSON.stringify(rows.rows);
  } finally {
    await client.end();
  }
}

describe('tokens across instances and requests', () => {
  it('sees a token revoked elsewhere once its cache time has passed', async () => {
    const running = await startServer({ tokenCacheMs: 300 });
    const { token, info } = await running.server.store.tokens.create({ scope: 'read' });
    expect((await call(running.url, 'GET', '/v1/events', token)).status).toBe(200);
    // Revoked in the store directly, as `oncebox token revoke` on another machine does.
    await running.server.store.tokens.revoke(info.id);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect((await call(running.url, 'GET', '/v1/events', token)).status).toBe(401);
  });

  it('starts asking for a token once the first one is created, and keeps asking after a restart with every token revoked', async () => {
    const running = await startServer({ tokenCacheMs: 0 });
    expect((await call(running.url, 'GET', '/v1/events', undefined)).status).toBe(200);
    const { info } = await running.server.store.tokens.create({ scope: 'read' });
    expect((await call(running.url, 'GET', '/v1/events', undefined)).status).toBe(401);
    await running.server.store.tokens.revoke(info.id);
    await running.close();
    const restarted = await startServer({ db: running.dbPath });
    expect((await call(restarted.url, 'GET', '/v1/events', undefined)).status).toBe(401);
  });

  it('keeps the single --token of earlier versions as an admin token beside scoped ones', async () => {
    const running = await startServer({ token: 'the-old-shared-one' });
    const read = await tokenFor(running, { scope: 'read' });
    expect((await call(running.url, 'PUT', '/v1/assets/x1', 'the-old-shared-one')).status).toBe(201);
    expect((await call(running.url, 'PUT', '/v1/assets/x2', read)).status).toBe(403);
    expect((await call(running.url, 'GET', '/v1/events', read)).status).toBe(200);
    expect((await call(running.url, 'GET', '/v1/events', 'the-old-shared-onE')).status).toBe(401);
  });

  it('limits the requests of each token on its own, with 429 problem+json and Retry-After', async () => {
    const running = await startServer({ rateLimit: { max: 3, windowMs: 60_000 } });
    const first = await tokenFor(running, { scope: 'read' });
    const second = await tokenFor(running, { scope: 'read' });
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await call(running.url, 'GET', '/v1/events', first)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    const response = await fetch(`${running.url}/v1/events`, { headers: { authorization: `Bearer ${first}` } });
    expect(response.status).toBe(429);
    expect(response.headers.get('content-type')).toBe(PROBLEM);
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await response.json()).toMatchObject({ status: 429, code: 'rate_limited' });
    expect((await call(running.url, 'GET', '/v1/events', second)).status).toBe(200);
    // Paths that are no route count too: a token cannot spend the server's time on 404s past its limit.
    const lost = [];
    for (let i = 0; i < 3; i++) lost.push((await call(running.url, 'GET', `/v1/nothing-${i}`, second)).status);
    expect(lost).toEqual([404, 404, 429]);
  });

  it('counts nothing on a server without tokens, where there is no one to count against', async () => {
    const running = await startServer({ rateLimit: { max: 2, windowMs: 60_000 } });
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await call(running.url, 'GET', '/v1/events', undefined)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200]);
  });

  it('delivers everything through a rate limit, waiting as Retry-After says', async () => {
    const running = await startServer({ rateLimit: { max: 2, windowMs: 1000 } });
    const token = await tokenFor(running, { scope: 'publish', producers: 'orders-ingest' });
    const box = await openOutbox({
      path: join(tempDir(), 'outbox.db'),
      producer: 'orders-ingest',
      run: RUN,
      server: running.url,
      token,
      batchMaxRows: 1,
    });
    const receipts = [];
    for (let i = 1; i <= 6; i++) receipts.push(box.asset('batch_ready').emit({ partitionKey: `batch-${i}` }));
    const delivered = await Promise.all(receipts);
    expect(new Set(delivered.map((r) => r.eventId)).size).toBe(6);
    expect((await running.server.store.listEvents({ after: 0, limit: 10 })).events.map((e) => e.partitionKey)).toEqual([1, 2, 3, 4, 5, 6].map((i) => `batch-${i}`));
    await box.close();
  });
});
