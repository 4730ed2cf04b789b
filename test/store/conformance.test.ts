import { connect } from 'node:net';
import Database from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { PostgresDedupeStore } from '../../src/dedupe/postgres/store.js';
import { item, newKey, post, rawRequest, STREAM } from '../support/http.js';
import { PG_URL, pgAvailable, pgSkipReason } from '../support/postgres.js';
import { allEvents, startServer, type Backend, type RunningServer } from '../support/server.js';
import { seededRandom } from '../support/seeded-random.js';

/**
 * Makes the store's write of a stream's position fail, from outside the server (a trigger), so that a
 * request fails after its events (and their dedupe records) were written. Returns the undo.
 */
async function failPositionWrite(running: RunningServer, backend: Backend): Promise<() => Promise<void>> {
  if (backend === 'sqlite') {
    const db = new Database(running.dbPath);
    db.exec(`CREATE TRIGGER fail_position BEFORE INSERT ON stream_seqs BEGIN SELECT RAISE(ABORT, 'injected failure'); END`);
    return async () => {
      db.exec('DROP TRIGGER fail_position');
      db.close();
    };
  }
  const schema = (running.server.store as PostgresDedupeStore).schema;
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`
    CREATE FUNCTION "${schema}".fail_position() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'injected failure';
    END $$;
    CREATE TRIGGER fail_position BEFORE INSERT ON "${schema}".stream_seqs FOR EACH ROW EXECUTE FUNCTION "${schema}".fail_position();`);
  return async () => {
    await client.query(`DROP TRIGGER fail_position ON "${schema}".stream_seqs`);
    await client.end();
  };
}

/**
 * One conformance suite for the dedupe store, run through the HTTP API against every backend: the
 * embedded SQLite store and the PostgreSQL store. PostgreSQL tests skip, and say why, when no server
 * answers at ONCEBOX_TEST_PG, except under CI=true, where they fail.
 */
const BACKENDS: Backend[] = ['sqlite', 'postgres'];

for (const backend of BACKENDS) {
  const skip = backend === 'postgres' && !pgAvailable;
  describe.skipIf(skip)(`dedupe store conformance: ${backend}${backend === 'postgres' ? pgSkipReason : ''}`, () => {
  const emissions = (url: string) => `${url}/v1/emissions`;
  const send = (url: string, items: unknown[], stream: object = STREAM) =>
    post(emissions(url), JSON.stringify({ stream, items }));

  describe('POST /v1/emissions', () => {
    it('accepts new keys and answers a retry with the very same receipt', async () => {
      const { url } = await startServer({ backend });
      const [k1, k2] = [newKey(), newKey()];
      const first = await send(url, [item(1, k1), item(2, k2)]);
      expect(first.status).toBe(200);
      expect(first.json.results).toEqual([
        { status: 'accepted', seq: 1, key: k1, eventId: expect.any(String), timestamp: expect.any(String) },
        { status: 'accepted', seq: 2, key: k2, eventId: expect.any(String), timestamp: expect.any(String) },
      ]);
      const retry = await send(url, [item(1, k1), item(2, k2)]);
      expect(retry.json.results).toEqual(first.json.results.map((r: object) => ({ ...r, status: 'duplicate' })));
      expect(await allEvents(url)).toHaveLength(2);
      expect(first.json.results[0].eventId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7/);
    });

    it('answers the same key with another payload as a conflict, and keeps answering so', async () => {
      const { url } = await startServer({ backend });
      const key = newKey();
      await send(url, [item(1, key, { extra: { rows: 1 } })]);
      const other = { ...STREAM, runId: 'r2' };
      const conflict = await send(url, [item(1, key, { extra: { rows: 2 } })], other);
      expect(conflict.json.results).toEqual([
        {
          status: 'conflict',
          seq: 1,
          key,
          code: 'key_conflict',
          detail: expect.stringMatching(new RegExp(`^key ${key} was stored before with a different payload`)),
        },
      ]);
      expect((await send(url, [item(1, key, { extra: { rows: 2 } })], other)).json.results).toEqual(conflict.json.results);
      expect(await allEvents(url)).toHaveLength(1);
    });

    it("scopes keys by producer: another producer's key neither answers nor blocks this one's", async () => {
      const { url } = await startServer({ backend });
      const key = newKey();
      const squatted = await send(url, [item(1, key, { partitionKey: 'batch-1', extra: { forged: true } })], { ...STREAM, producer: 'attacker' });
      expect(squatted.json.results[0].status).toBe('accepted');
      const real = await send(url, [item(1, key, { partitionKey: 'batch-1' })], { ...STREAM, producer: 'victim' });
      expect(real.json.results[0]).toMatchObject({ status: 'accepted', key });
      expect(real.json.results[0].eventId).not.toBe(squatted.json.results[0].eventId);
      const retry = await send(url, [item(1, key, { partitionKey: 'batch-1' })], { ...STREAM, producer: 'victim', runId: 'r2' });
      expect(retry.json.results[0]).toEqual({ ...real.json.results[0], status: 'duplicate' });
      expect((await allEvents(url)).map((event) => [event.producer, event.key])).toEqual([['attacker', key], ['victim', key]]);
    });

    it("keeps a key one event whether or not the producer says it is its run's alone (oncebox-run-keys), in either order", async () => {
      const { url } = await startServer({ backend });
      const [older, newer] = [newKey(), newKey()];
      const sendSaying = (runKeys: string, items: unknown[], stream: object) =>
        post(emissions(url), JSON.stringify({ stream, items }), { 'content-type': 'application/json', 'oncebox-run-keys': runKeys });
      // One key stored by a relay that did not say (an older one), one said to be the run's; a retry of the
      // run (another attempt, so the keys are looked up, not the positions) says the opposite of each.
      const first = await sendSaying('1', [item(1, older), item(2, newer)], STREAM);
      expect(first.json.results.map((result: { status: string }) => result.status)).toEqual(['accepted', 'accepted']);
      const retry = await send(url, [item(1, older), item(2, newer), item(3, newKey())], { ...STREAM, attempt: 2 });
      const retrySaying = await sendSaying('0-1', [item(1, older), item(2, newer)], { ...STREAM, attempt: 3 });
      for (const answer of [retry, retrySaying]) {
        expect(answer.json.results.slice(0, 2)).toEqual(first.json.results.map((result: object) => ({ ...result, status: 'duplicate' })));
      }
      expect(retry.json.results[2]).toMatchObject({ status: 'accepted', seq: 3 });
      // Another payload under a key of the run (its partition kept, as a key derived from it has) is still a
      // conflict, and each duplicate is counted.
      const changed = await sendSaying('0', [item(1, newer, { partitionKey: 'batch-2', extra: { rows: 2 } })], { ...STREAM, attempt: 4 });
      expect(changed.json.results[0]).toMatchObject({ status: 'conflict', code: 'key_conflict' });
      expect(await allEvents(url)).toHaveLength(3);
      const partitions = (await (await fetch(`${url}/v1/catalog/assets/batch_ready/partitions`)).json()) as { items: { partitionKey: string; duplicates: number }[] };
      expect(partitions.items.map((partition) => [partition.partitionKey, partition.duplicates])).toEqual([['batch-1', 2], ['batch-2', 2], ['batch-3', 0]]);
      // A header that is not a list of positions refuses the request, and stores nothing of it; positions
      // that name no item of the batch change nothing.
      for (const runKeys of ['x', '0;1', '-1']) {
        const bad = await sendSaying(runKeys, [item(1, newKey())], { ...STREAM, attempt: 5 });
        expect([bad.status, bad.json.code, bad.json.detail]).toEqual([400, 'invalid_request', 'oncebox-run-keys header: must be item positions and ranges, e.g. "0-499" or "0,2,5-9"']);
      }
      expect(await allEvents(url)).toHaveLength(3);
      expect((await sendSaying('0-999,5-2', [item(1, newKey())], { ...STREAM, attempt: 5 })).json.results[0]).toMatchObject({ status: 'accepted' });
    });

    it('stores the longest names the protocol allows, in characters of four bytes each: a listed key, its partition and a checkpoint', async () => {
      const { url } = await startServer({ backend });
      // Characters of 4 bytes in UTF-8 each, all different (PostgreSQL compresses a repetitive index entry):
      // past its 2,704-byte index entry, when several sit in one.
      // Seeded: the same characters every run.
      const random = seededRandom(20261202);
      const long = (n: number) => Array.from({ length: n }, () => String.fromCodePoint(0x20000 + Math.floor(random() * 0xa000))).join('');
      const stream = { producer: long(200), workflow: long(200), runId: long(200), task: long(200), attempt: 1 };
      const items = [item(1, newKey(), { partitionKey: long(512) }), { seq: 2, key: newKey(), kind: 'checkpoint', name: long(200), value: 1 }];
      const sendAt = (attempt: number) =>
        post(emissions(url), JSON.stringify({ stream: { ...stream, attempt }, items }), { 'content-type': 'application/json', 'oncebox-run-keys': '0' });
      const first = await sendAt(1);
      expect([first.status, first.json.results.map((r: { status: string }) => r.status)]).toEqual([200, ['accepted', 'checkpointed']]);
      const retry = await sendAt(2);
      expect(retry.json.results[0]).toEqual({ ...first.json.results[0], status: 'duplicate' });
      expect(await allEvents(url)).toHaveLength(1);
    });

    it('reads a key in upper-case hex as the same key, and answers it in lower case', async () => {
      const { url } = await startServer({ backend });
      const key = 'abcdef01-2345-4678-9abc-def012345678';
      const first = await send(url, [item(1, key.toUpperCase())]);
      expect(first.json.results[0]).toMatchObject({ status: 'accepted', key });
      const retry = await send(url, [item(1, key)], { ...STREAM, runId: 'r2' });
      expect(retry.json.results[0]).toEqual({ ...first.json.results[0], status: 'duplicate' });
      expect((await allEvents(url)).map((event) => event.key)).toEqual([key]);
    });

    it('answers a key repeated within one request as a duplicate of its first item there', async () => {
      const { url } = await startServer({ backend });
      const key = newKey();
      const answer = await send(url, [item(1, key, { partitionKey: 'same' }), item(2, key, { partitionKey: 'same' }), item(3, key, { partitionKey: 'other' })]);
      const [first, again, other] = answer.json.results;
      expect(first).toMatchObject({ status: 'accepted', seq: 1 });
      expect(again).toEqual({ status: 'duplicate', seq: 2, key, eventId: first.eventId, timestamp: first.timestamp });
      expect(other).toMatchObject({ status: 'conflict', seq: 3, code: 'key_conflict' });
      expect(await allEvents(url)).toHaveLength(1);
    });

    // The stores once resolved these differently: PostgreSQL read the retried positions before this
    // request wrote anything, so an item sent twice in one request was refused as reusing its own seq.
    it('answers an item sent twice in one request, at the same position, as it answered the first', async () => {
      const { url } = await startServer({ backend });
      const [event, mark, unknown, clash] = [newKey(), newKey(), newKey(), newKey()];
      await send(url, [item(1, clash, { extra: { v: 1 } })], { ...STREAM, runId: 'elsewhere' });
      const mirror = { seq: 2, key: mark, kind: 'checkpoint', name: 'cp', value: 7 };
      const stranger = item(3, unknown, { asset: 'never_registered' });
      const clashing = item(4, clash, { extra: { v: 2 } });
      const answer = await send(url, [item(1, event), item(1, event), mirror, mirror, stranger, stranger, clashing, clashing]);
      const results = answer.json.results;
      expect(results.map((r: { status: string }) => r.status)).toEqual([
        'accepted', 'duplicate', 'checkpointed', 'checkpointed', 'rejected', 'rejected', 'conflict', 'conflict',
      ]);
      expect(results[1]).toEqual({ ...results[0], status: 'duplicate' });
      expect(results[5]).toEqual(results[4]);
      expect(results[7]).toEqual(results[6]);
      // Another item at a position this request took is still a reuse of that position.
      const reuse = await send(url, [item(5, newKey()), item(5, newKey())]);
      expect(reuse.json.results.map((r: { status: string; code?: string }) => r.code ?? r.status)).toEqual(['accepted', 'sequence_reused']);
    });

    it('answers a retry of an item that was a duplicate of another stream as a duplicate again', async () => {
      const { url } = await startServer({ backend });
      const key = newKey();
      const first = await send(url, [item(1, key)], { ...STREAM, runId: 'first' });
      const second = await send(url, [item(1, key)], { ...STREAM, runId: 'second' });
      expect(second.json.results[0]).toEqual({ ...first.json.results[0], status: 'duplicate' });
      expect((await send(url, [item(1, key)], { ...STREAM, runId: 'second' })).json.results).toEqual(second.json.results);
    });

    it('answers a gap filled later with the item that filled it, on a retry too', async () => {
      const { url } = await startServer({ backend });
      const [k1, k2] = [newKey(), newKey()];
      expect((await send(url, [item(2, k2)])).json.results[0].status).toBe('gap');
      const filled = await send(url, [item(1, k1), item(2, k2)]);
      expect(filled.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'accepted']);
      expect((await send(url, [item(2, k2)])).json.results[0]).toEqual({ ...filled.json.results[1], status: 'duplicate' });
    });

    it('stores every field of an event and gives it back as it was sent', async () => {
      const { url } = await startServer({ backend });
      const key = newKey();
      const stream = { producer: 'prod', workflow: 'flow', runId: 'run-7', task: 'load', attempt: 3 };
      const sent = item(1, key, { partitionKey: 'p-1', partitionDate: '2026-11-30T10:00:00+01:00', extra: { rows: 7, tags: ['a'] } });
      const receipt = (await send(url, [sent, item(2, newKey(), { partitionKey: 'bare' })], stream)).json.results[0];
      const [full, bare] = await allEvents(url);
      expect(full).toEqual({
        cursor: expect.any(Number),
        eventId: receipt.eventId,
        timestamp: receipt.timestamp,
        key,
        asset: 'batch_ready',
        partitionKey: 'p-1',
        partitionDate: '2026-11-30T10:00:00+01:00',
        extra: { rows: 7, tags: ['a'] },
        producer: 'prod',
        workflow: 'flow',
        runId: 'run-7',
        task: 'load',
        attempt: 3,
        seq: 1,
        trace: null,
        causedBy: null,
        depth: 0,
      });
      expect(bare).toMatchObject({ partitionKey: 'bare', partitionDate: null, extra: null, seq: 2 });
    });

    it('treats key order and whitespace in extra as the same payload', async () => {
      const { url } = await startServer({ backend });
      const key = newKey();
      await send(url, [item(1, key, { extra: { a: 1, b: [1, { c: 2, d: 3 }] } })]);
      const body = `{"stream":${JSON.stringify(STREAM)},"items":[{"seq":1,"key":"${key}","kind":"event","asset":"batch_ready","partitionKey":"batch-1","extra":{ "b" : [1, {"d":3,"c":2}], "a":1 }}]}`;
      expect((await post(emissions(url), body)).json.results[0].status).toBe('duplicate');
    });

    it('refuses an item past a gap, so the relay resends in order', async () => {
      const { url } = await startServer({ backend });
      const [k1, k3] = [newKey(), newKey()];
      const result = await send(url, [item(1, k1), item(3, k3)]);
      expect(result.json.results[1]).toEqual({ status: 'gap', seq: 3, key: k3, expectedSeq: 2 });
      expect(await allEvents(url)).toHaveLength(1);
    });

    it('rejects bad items one by one with a stable code, and the stream goes on past them', async () => {
      const { url } = await startServer({ backend });
      const keys = [newKey(), newKey(), newKey(), newKey()];
      const result = await send(url, [
        item(1, keys[0]!, { asset: 'unknown_thing' }),
        item(2, keys[1]!, { partitionDate: 'yesterday' }),
        { seq: 3, key: 'not-a-uuid', kind: 'event', asset: 'batch_ready' },
        item(3, keys[2]!),
      ]);
      expect(result.json.results).toEqual([
        expect.objectContaining({ status: 'rejected', seq: 1, code: 'unknown_asset', field: 'asset' }),
        {
          status: 'rejected',
          seq: 2,
          key: keys[1],
          code: 'invalid_item',
          field: 'items[1].partitionDate',
          detail: 'items[1].partitionDate: must be an ISO 8601 date-time with an explicit offset or Z, e.g. "2026-11-30T00:00:00Z" (got "yesterday")',
        },
        {
          status: 'rejected',
          seq: null,
          key: null,
          code: 'invalid_item',
          field: 'items[2].key',
          detail: 'items[2].key: Invalid UUID',
        },
        expect.objectContaining({ status: 'accepted', seq: 3 }),
      ]);
      // A retry of the rejected items gets the same answers.
      const retry = await send(url, [item(1, keys[0]!, { asset: 'unknown_thing' })]);
      expect(retry.json.results[0]).toEqual(result.json.results[0]);
      // A different key at a taken position is refused.
      expect((await send(url, [item(3, keys[3]!)])).json.results[0]).toMatchObject({ status: 'rejected', code: 'sequence_reused' });
    });

    it('refuses NUL and unpaired surrogates item by item, and a stream or path that holds them as a whole, never with a 5xx', async () => {
      const { url } = await startServer({ backend });
      const rule = 'must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters';
      const answer = await send(url, [
        item(1, newKey(), { partitionKey: 'nul\u0000' }),
        item(2, newKey(), { partitionKey: 'half\ud800' }),
        item(3, newKey(), { extra: { note: 'x\u0000' } }),
        { seq: 4, key: newKey(), kind: 'checkpoint', name: 'n\u0000', value: 1 },
        { seq: 5, key: newKey(), kind: 'checkpoint', name: 'n', value: { s: '\udfff' } },
        item(6, newKey()),
        { ...item(7, newKey()), 'bad\u0000name\ud800': 1 },
      ]);
      expect(answer.status).toBe(200);
      // An unknown field's name is repeated in the answer, which the store records: as plain text.
      expect(answer.json.results[6]).toMatchObject({ status: 'rejected', code: 'invalid_item', field: 'items[6].bad\ufffdname\ufffd' });
      answer.json.results.pop();
      expect(answer.json.results.map((r: { status: string; field?: string; detail?: string }) => [r.status, r.field, r.detail?.endsWith(rule) ?? null])).toEqual([
        ['rejected', 'items[0].partitionKey', true],
        ['rejected', 'items[1].partitionKey', true],
        ['rejected', 'items[2].extra.note', true],
        ['rejected', 'items[3].name', true],
        ['rejected', 'items[4].value.s', true],
        ['accepted', undefined, null],
      ]);
      for (const stream of [{ ...STREAM, producer: 'p\u0000' }, { ...STREAM, runId: 'r\ud800' }, { ...STREAM, task: 't\u0000' }, { ...STREAM, workflow: '\udc00' }]) {
        const refused = await send(url, [item(1, newKey())], stream);
        expect({ status: refused.status, code: refused.json.code, detail: refused.json.detail.endsWith(rule) }).toEqual({ status: 400, code: 'invalid_request', detail: true });
      }
      // A name of 200 characters is a path segment of up to 2400 percent-encoded: none of them is a 414.
      const longest = encodeURIComponent('\u{1F600}'.repeat(100));
      expect((await fetch(`${url}/v1/streams/p/${longest}`)).status).toBe(404);
      for (const [path, status] of [[`/v1/streams/${'p'.repeat(201)}/r`, 400], [`/v1/streams/${'p'.repeat(5000)}/r`, 400], [`/v1/assets/${'a'.repeat(300)}`, 400]] as const) {
        const refused = await fetch(`${url}${path}`, path.startsWith('/v1/assets') ? { method: 'PUT' } : {});
        expect({ status: refused.status, type: refused.headers.get('content-type') }).toEqual({ status, type: 'application/problem+json; charset=utf-8' });
      }
      for (const path of ['/v1/streams/p%00/r', '/v1/streams/p/r%00', '/v1/streams/p/r?task=t%00', '/v1/streams/p/%ED%A0%80']) {
        const refused = await fetch(`${url}${path}`);
        expect({ path, status: refused.status }).toEqual({ path, status: 400 });
        expect(await refused.json()).toMatchObject({ code: 'invalid_request' });
      }
      expect((await allEvents(url)).map((event) => event.seq)).toEqual([6]);
      expect((await send(url, [{ ...item(7, newKey()), 'bad\u0000name\ud800': 1 }])).json.results[0]).toMatchObject({ status: 'rejected' });
    });

    it('answers a malformed request with problem+json and a stable code', async () => {
      const { url } = await startServer({ backend, bodyLimit: 4096, maxBatchItems: 3 });
      const cases: [string, Record<string, string>, number, string][] = [
        ['{"stream":', { 'content-type': 'application/json' }, 400, 'malformed_json'],
        ['{"__proto__":{"x":1}}', { 'content-type': 'application/json' }, 400, 'invalid_request'],
        ['{"stream":{"\\u005f_proto__":{}},"items":[]}', { 'content-type': 'application/json' }, 400, 'invalid_request'],
        ['', { 'content-type': 'application/json' }, 400, 'invalid_request'],
        ['hello', { 'content-type': 'text/plain' }, 415, 'unsupported_media_type'],
        [JSON.stringify({ stream: STREAM, items: [{}, {}, {}, {}] }), { 'content-type': 'application/json' }, 413, 'batch_too_large'],
        [JSON.stringify({ stream: STREAM, items: ['x'.repeat(5000)] }), { 'content-type': 'application/json' }, 413, 'body_too_large'],
        [JSON.stringify({ stream: { ...STREAM, attempt: 0 }, items: [{}] }), { 'content-type': 'application/json' }, 400, 'invalid_request'],
        [JSON.stringify({ stream: STREAM, items: [], extra: 1 }), { 'content-type': 'application/json' }, 400, 'invalid_request'],
      ];
      for (const [body, headers, status, code] of cases) {
        const answer = await post(emissions(url), body, headers);
        expect({ status: answer.status, code: answer.json?.code, type: answer.contentType }).toEqual({
          status,
          code,
          type: 'application/problem+json; charset=utf-8',
        });
        expect(answer.json).toMatchObject({ type: `https://oncebox.dev/problems/${code}`, title: expect.any(String), detail: expect.any(String) });
      }
      const batch = await post(emissions(url), JSON.stringify({ stream: STREAM, items: [{}, {}, {}, {}] }));
      expect(batch.json).toMatchObject({ detail: 'items: at most 3 per request (got 4); split the batch', field: 'items' });
      const missing = await post(emissions(url), JSON.stringify({ items: [{}] }));
      expect(missing.json).toMatchObject({ detail: 'stream: is required', field: 'stream' });
      const notFound = await fetch(`${url}/v2/nothing`);
      expect(notFound.status).toBe(404);
      expect(await notFound.json()).toMatchObject({ code: 'not_found', detail: 'no route for GET /v2/nothing' });
    });

    it('takes a checkpoint revision up to what both stores keep (2^31 - 1), and refuses a higher one per item', async () => {
      const { url } = await startServer({ backend });
      const answer = await send(url, [
        { seq: 1, key: newKey(), kind: 'checkpoint', name: 'progress', value: 1, revision: 2 ** 31 - 1 },
        { seq: 2, key: newKey(), kind: 'checkpoint', name: 'other', value: 1, revision: 2 ** 31 },
        item(3, newKey()),
      ]);
      expect(answer.status).toBe(200);
      expect(answer.json.results.map((r: { status: string; field?: string }) => [r.status, r.field])).toEqual([
        ['checkpointed', undefined],
        ['rejected', 'items[1].revision'],
        ['accepted', undefined],
      ]);
    });

    it('keeps at most 64 checkpoint names per stream: a new name past them is refused at its position, updates go on', async () => {
      const { url } = await startServer({ backend });
      const checkpoint = (seq: number, name: string, value: unknown) => ({ seq, key: newKey(), kind: 'checkpoint', name, value });
      const first = await send(url, Array.from({ length: 60 }, (_, i) => checkpoint(i + 1, `n${i}`, i)));
      expect(new Set(first.json.results.map((r: { status: string }) => r.status))).toEqual(new Set(['checkpointed']));
      const past = [checkpoint(61, 'n0', 'updated'), ...Array.from({ length: 5 }, (_, i) => checkpoint(62 + i, `m${i}`, i)), item(67, newKey())];
      const second = await send(url, past);
      expect(second.json.results.map((r: { status: string; code?: string }) => r.code ?? r.status)).toEqual([
        'checkpointed',
        'checkpointed',
        'checkpointed',
        'checkpointed',
        'checkpointed',
        'too_many_checkpoints',
        'accepted',
      ]);
      expect(second.json.results[5]).toMatchObject({ seq: 66, field: 'name', detail: expect.stringContaining('holds 64 checkpoint names already') });
      // A retry gets the same answers; the stream's state holds the 64, the update among them.
      expect((await send(url, past)).json.results.map((r: { status: string; code?: string }) => r.code ?? r.status)[5]).toBe('too_many_checkpoints');
      const state = (await (await fetch(`${url}/v1/streams/${STREAM.producer}/${STREAM.runId}`)).json()) as { checkpoints: Record<string, unknown> };
      expect(Object.keys(state.checkpoints)).toHaveLength(64);
      expect(state.checkpoints.n0).toBe('updated');
      expect(state.checkpoints.m4).toBeUndefined();
    });

    it('keeps and answers a checkpoint named like an Object property (__proto__, constructor) as any other', async () => {
      const { url } = await startServer({ backend });
      const names = ['__proto__', 'constructor', 'toString'];
      const answer = await send(url, names.map((name, i) => ({ seq: i + 1, key: newKey(), kind: 'checkpoint', name, value: { at: i } })));
      expect(answer.json.results.map((r: { status: string }) => r.status)).toEqual(['checkpointed', 'checkpointed', 'checkpointed']);
      const state = await fetch(`${url}/v1/streams/${STREAM.producer}/${STREAM.runId}`);
      const text = await state.text();
      expect(text).toContain('"__proto__":{"at":0}');
      const checkpoints = JSON.parse(text).checkpoints;
      expect(Object.keys(checkpoints).sort()).toEqual([...names].sort());
    });

    it('refuses an item with a __proto__ key on its own, however spelt, and a body that is not UTF-8 as a whole', async () => {
      const { url } = await startServer({ backend });
      const keys = [newKey(), newKey(), newKey(), newKey()];
      const body = JSON.stringify({ stream: STREAM, items: [item(1, keys[0]!), item(2, keys[1]!, { extra: { nested: [{ polluted: true }] } }), item(3, keys[2]!), item(4, keys[3]!)] })
        .replace('{"polluted":true}', '{"__proto__":{"polluted":true}}')
        .replace(`"seq":3,`, '"seq":3,"\\u005f_pr\\u006fto__":1,');
      const answer = await post(emissions(url), body);
      expect(answer.status).toBe(200);
      expect(answer.json.results.map((r: { status: string; seq: number | null; field?: string; detail?: string }) => [r.status, r.seq, r.field, r.detail])).toEqual([
        ['accepted', 1, undefined, undefined],
        ['rejected', 2, 'items[1].extra.nested[0].__proto__', 'items[1].extra.nested[0].__proto__: is a reserved key; rename it'],
        ['rejected', 3, 'items[2].__proto__', 'items[2].__proto__: is a reserved key; rename it'],
        ['accepted', 4, undefined, undefined],
      ]);
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expect((await allEvents(url)).map((event) => event.seq)).toEqual([1, 4]);
      // However long the keys on the way to it, the refusal (which the store records for a retry) stays small.
      const huge = 'k'.repeat(100_000);
      const deep = JSON.stringify({ stream: STREAM, items: [item(5, newKey(), { extra: { [huge]: { [huge]: { polluted: 1 } } } }), item(6, newKey(), { [huge]: 1 })] }).replace(
        '{"polluted":1}',
        '{"__proto__":1}',
      );
      for (let round = 0; round < 2; round++) {
        const bounded = await post(emissions(url), deep);
        expect(bounded.json.results.map((r: { status: string }) => r.status)).toEqual(['rejected', 'rejected']);
        for (const result of bounded.json.results) expect({ field: result.field.length < 400, detail: result.detail.length < 1200 }).toEqual({ field: true, detail: true });
        expect(bounded.text.length).toBeLessThan(3000);
      }
      // Latin-1 bytes sent as UTF-8 would be stored as U+FFFD: the request is refused instead.
      const latin1 = Buffer.concat([Buffer.from(JSON.stringify({ stream: STREAM, items: [item(5, newKey(), { partitionKey: 'caf' })] }).replace('"caf"', '"caf')), Buffer.from([0xe9]), Buffer.from('"}]}')]);
      const refused = await fetch(emissions(url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: latin1 });
      expect({ status: refused.status, json: await refused.json() }).toMatchObject({ status: 400, json: { code: 'malformed_json', detail: 'the body is not valid UTF-8; send JSON encoded as UTF-8' } });
    });

    it('requires the token when one is set', async () => {
      const { url } = await startServer({ backend, token: 'secret-token' });
      const denied = await send(url, [item(1, newKey())]);
      expect(denied.status).toBe(401);
      expect(denied.json).toMatchObject({ code: 'unauthorized' });
      const allowed = await post(emissions(url), JSON.stringify({ stream: STREAM, items: [item(1, newKey())] }), {
        'content-type': 'application/json',
        authorization: 'Bearer secret-token',
      });
      expect(allowed.status).toBe(200);
    });

    it("gives a request's events cursors in its stream order, whatever order their keys sort in", async () => {
      const { url } = await startServer({ backend });
      // Keys in descending order: a store that inserts in key order (as PostgreSQL does, against deadlocks) must still number by seq.
      const keys = Array.from({ length: 20 }, () => newKey()).sort().reverse();
      const answer = await send(url, keys.map((key, i) => item(i + 1, key)));
      expect(answer.json.results.every((r: { status: string }) => r.status === 'accepted')).toBe(true);
      expect((await allEvents(url)).map((event) => event.seq)).toEqual(keys.map((_, i) => i + 1));
    });

    it('stores nothing of a request that fails part-way: its retry is new, not a duplicate', async () => {
      const running = await startServer({ backend });
      const { url } = running;
      const [k1, k2] = [newKey(), newKey()];
      const batch = [item(1, k1), item(2, k2)];
      const removeFault = await failPositionWrite(running, backend);
      const failed = await send(url, batch);
      expect(failed.status).toBe(500);
      expect(failed.json).toMatchObject({ code: 'internal' });
      await removeFault();
      const retry = await send(url, batch);
      expect(retry.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'accepted']);
      expect((await send(url, [item(3, newKey())])).json.results[0].status).toBe('accepted');
      expect(await allEvents(url)).toHaveLength(3);
    });
  });

  describe('GET /v1/events and assets', () => {
    it('waits with ?wait= for the next event of the asset asked for, and answers as soon as it is stored', async () => {
      const { url } = await startServer({ backend });
      await send(url, [item(1, newKey())]);
      const [first] = await allEvents(url);
      const waiting = fetch(`${url}/v1/events?asset=batch_ready&after=${first!.cursor}&wait=20`).then(async (response) => ({ at: Date.now(), page: (await response.json()) as any }));
      await new Promise((resolve) => setTimeout(resolve, 300));
      // An event of another asset does not answer the reader; the next of its own asset does.
      await send(url, [item(2, newKey(), { asset: 'run_done' })]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await send(url, [item(3, newKey())]);
      // The storing request has answered: its transaction committed by now.
      const committedAt = Date.now();
      const { at, page } = await waiting;
      expect(page.events.map((event: { seq: number }) => event.seq)).toEqual([3]);
      // Within 100 ms of the commit (the reader's own look-again interval is 5 s): the store's wake-up answered it.
      expect(at - committedAt).toBeLessThan(100);
    });

    it('wakes only the waiting readers of the assets that got events, and readers woken together share one read', async () => {
      const running = await startServer({ backend, assets: ['quiet', 'busy', 'batch_ready'] });
      const { url, server } = running;
      // Counts the store's reads of events, as the waiting readers make them.
      let reads = 0;
      const listEvents = server.store.listEvents.bind(server.store);
      server.store.listEvents = (query) => {
        reads++;
        return listEvents(query);
      };
      const quiet = Array.from({ length: 40 }, () => fetch(`${url}/v1/events?asset=quiet&after=0&wait=4`).then((r) => r.json() as Promise<{ events: unknown[] }>));
      const busyReaders = Array.from({ length: 40 }, () =>
        fetch(`${url}/v1/events?asset=busy&after=0&wait=30`).then(async (r) => ({ page: (await r.json()) as { events: unknown[] } })),
      );
      await new Promise((resolve) => setTimeout(resolve, 500));
      const before = reads;
      // Twenty publishes to batch_ready: no waiting reader is woken, so none reads again.
      for (let i = 1; i <= 20; i++) await send(url, [item(i, newKey())]);
      expect(reads - before).toBe(0);
      // One event of busy: its 40 readers are answered at once, from a few reads of the store, not 40.
      await send(url, [item(21, newKey(), { asset: 'busy', partitionKey: 'b' })]);
      const answered = await Promise.all(busyReaders);
      expect(answered.every(({ page }) => page.events.length === 1)).toBe(true);
      // Woken by the commit, not by their waits ending: a reader whose wait ended reads the store itself,
      // and 40 of them would read 40 times.
      expect(reads - before).toBeLessThanOrEqual(4);
      expect((await Promise.all(quiet)).every((page) => page.events.length === 0)).toBe(true);
    });

    it('caps waiting reads per token (429) and per instance (503), with Retry-After, and counts the refusals', async () => {
      const running = await startServer({ backend, maxWaiters: 6, maxWaitersPerToken: 4 });
      const admin = (await running.server.store.tokens.create({ scope: 'admin' })).token;
      const readers = await Promise.all([1, 2].map(async () => (await running.server.store.tokens.create({ scope: 'read' })).token));
      const wait = (token: string) => fetch(`${running.url}/v1/events?after=0&wait=3`, { headers: { authorization: `Bearer ${token}` } });
      const held = [0, 1, 2, 3].map(() => wait(readers[0]!));
      await new Promise((resolve) => setTimeout(resolve, 300));
      const fifth = await wait(readers[0]!);
      expect(fifth.status).toBe(429);
      expect(fifth.headers.get('retry-after')).toBe('1');
      expect(await fifth.json()).toMatchObject({ code: 'rate_limited', field: 'wait' });
      // Another token takes the two places left in all, then the instance is full.
      const other = [wait(readers[1]!), wait(readers[1]!)];
      await new Promise((resolve) => setTimeout(resolve, 300));
      const full = await wait(readers[1]!);
      expect(full.status).toBe(503);
      expect(await full.json()).toMatchObject({ code: 'overloaded', field: 'wait' });
      // A read without wait is never refused, and publishing goes on.
      expect((await fetch(`${running.url}/v1/events?after=0`, { headers: { authorization: `Bearer ${readers[0]}` } })).status).toBe(200);
      const metrics = await (await fetch(`${running.url}/metrics`, { headers: { authorization: `Bearer ${admin}` } })).text();
      expect(metrics).toContain('oncebox_event_reads_refused_total{reason="token"} 1');
      expect(metrics).toContain('oncebox_event_reads_refused_total{reason="total"} 1');
      await Promise.all([...held, ...other]);
      // Their places are free again once they answered.
      expect((await wait(readers[0]!)).status).toBe(200);
    });

    it('answers an empty page when the wait runs out, refuses a wait over 30 s, and answers waiting readers when it closes', async () => {
      const running = await startServer({ backend });
      const started = Date.now();
      const empty: any = await (await fetch(`${running.url}/v1/events?after=0&wait=0.3`)).json();
      expect(empty).toEqual({ events: [], next: 0 });
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      const tooLong = await fetch(`${running.url}/v1/events?wait=31`);
      expect(tooLong.status).toBe(400);
      expect(await tooLong.json()).toMatchObject({ code: 'invalid_request', field: 'wait' });
      const waiting = fetch(`${running.url}/v1/events?after=0&wait=25`).then(async (response) => ({ at: Date.now(), page: (await response.json()) as any }));
      await new Promise((resolve) => setTimeout(resolve, 200));
      const closing = Date.now();
      await running.close();
      const { at, page } = await waiting;
      expect(page).toEqual({ events: [], next: 0 });
      expect(at - closing).toBeLessThan(2500);
    });

    it('answers a method a route does not have with 405 and the methods it has, before any token', async () => {
      const running = await startServer({ backend });
      await running.server.store.tokens.create({ scope: 'admin' });
      for (const [method, path, allow] of [
        ['TRACE', '/healthz', 'GET, HEAD'],
        ['DELETE', '/v1/events', 'GET, HEAD'],
        ['GET', '/v1/emissions', 'POST'],
        ['PATCH', '/v1/tokens/0123456789abcdef', 'DELETE'],
        ['QUERY', '/v1/assets/a', 'PUT'],
      ] as const) {
        const answer = await rawRequest(running.url, method, path);
        expect({ method, path, status: answer.status, code: answer.json?.code, allow: answer.headers.allow }).toEqual({ method, path, status: 405, code: 'method_not_allowed', allow });
      }
      // An unknown path is still asked for a token first.
      expect((await rawRequest(running.url, 'TRACE', '/v1/nothing')).status).toBe(401);
      // Node hands CONNECT and an unmet Expect to no route: they are answered as problem+json all the same.
      const { hostname, port } = new URL(running.url);
      const connected = await new Promise<string>((resolve, reject) => {
        let text = '';
        const socket = connect(Number(port), hostname, () => socket.write(`CONNECT ${hostname}:1 HTTP/1.1\r\nHost: ${hostname}:1\r\n\r\n`));
        socket.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
        socket.on('close', () => resolve(text));
        socket.on('error', reject);
      });
      expect(connected).toMatch(/^HTTP\/1\.1 405 [^]*application\/problem\+json[^]*"code":"method_not_allowed"/);
      const expectation = await rawRequest(running.url, 'POST', '/v1/emissions', '{}', { expect: 'the-impossible', 'content-type': 'application/json' });
      expect({ status: expectation.status, type: expectation.type, code: expectation.json?.code }).toEqual({
        status: 417,
        type: 'application/problem+json; charset=utf-8',
        code: 'expectation_failed',
      });
    });

    it('pages events by cursor, optionally for one asset', async () => {
      const { url } = await startServer({ backend });
      const items = Array.from({ length: 7 }, (_, i) => item(i + 1, newKey(), { asset: i % 2 ? 'run_done' : 'batch_ready' }));
      await send(url, items);
      const page: any = await (await fetch(`${url}/v1/events?limit=3`)).json();
      expect(page.events.map((e: { seq: number }) => e.seq)).toEqual([1, 2, 3]);
      const next: any = await (await fetch(`${url}/v1/events?limit=3&after=${page.next}`)).json();
      expect(next.events.map((e: { seq: number }) => e.seq)).toEqual([4, 5, 6]);
      expect((await allEvents(url, { asset: 'run_done' })).map((e) => e.seq)).toEqual([2, 4, 6]);
      const bad = await fetch(`${url}/v1/events?limit=5000`);
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({ code: 'invalid_request', field: 'limit' });
      // Numbers as the protocol writes them: a typo never reads as another cursor.
      for (const [query, field] of [['after=', 'after'], ['after=0x10', 'after'], ['limit=1e2', 'limit'], ['after=%205', 'after'], ['limit=3.0', 'limit'], ['wait=0x1', 'wait'], ['wait=1e', 'wait']]) {
        const refused = await fetch(`${url}/v1/events?${query}`);
        expect({ query, status: refused.status, json: await refused.json() }).toMatchObject({ query, status: 400, json: { code: 'invalid_request', field, detail: expect.stringContaining('plain digits') } });
      }
      expect((await fetch(`${url}/v1/events?after=2&limit=1&wait=0.5`)).status).toBe(200);
      // A fraction as any OpenAPI client may write it, found by schemathesis: wait=2.225073858507203e-309.
      expect((await fetch(`${url}/v1/events?after=2&limit=1&wait=2.225073858507203e-309`)).status).toBe(200);
    });

    it('gives cursors that keep growing across writes and reads', async () => {
      const { url } = await startServer({ backend });
      await send(url, [item(1, newKey()), item(2, newKey())]);
      const first: any = await (await fetch(`${url}/v1/events`)).json();
      await send(url, [item(3, newKey()), item(4, newKey())]);
      const next: any = await (await fetch(`${url}/v1/events?after=${first.next}`)).json();
      const cursors = [...first.events, ...next.events].map((event: { cursor: number }) => event.cursor);
      expect(next.events.map((event: { seq: number }) => event.seq)).toEqual([3, 4]);
      expect(cursors).toEqual([...cursors].sort((a, b) => a - b));
      expect(new Set(cursors).size).toBe(4);
    });

    it('registers assets through the admin route, and only then accepts them', async () => {
      const { url } = await startServer({ backend });
      const key = newKey();
      expect((await send(url, [item(1, key, { asset: 'late_asset' })])).json.results[0].code).toBe('unknown_asset');
      const put = await fetch(`${url}/v1/assets/late_asset`, { method: 'PUT' });
      expect(put.status).toBe(201);
      expect((await fetch(`${url}/v1/assets/late_asset`, { method: 'PUT' })).status).toBe(200);
      expect(((await (await fetch(`${url}/v1/assets`)).json()) as any).assets).toContain('late_asset');
      expect((await send(url, [item(2, newKey(), { asset: 'late_asset' })])).json.results[0].status).toBe('accepted');
    });
  });

  describe('stream epochs, fencing and the checkpoint mirror', () => {
    const attempt = (n: number) => ({ ...STREAM, runId: 'fence-run', attempt: n });

    it('takes a revised checkpoint update at its position only upwards, and only while no newer position of it exists', async () => {
      const { url } = await startServer({ backend });
      const mark = newKey();
      const update = (seq: number, key: string, value: unknown, revision?: number) => ({ seq, key, kind: 'checkpoint', name: 'progress', value, ...(revision === undefined ? {} : { revision }) });
      const mirror = async () => ((await (await fetch(`${url}/v1/streams/p/fence-run`)).json()) as { checkpoints: unknown }).checkpoints;
      expect((await send(url, [item(1, newKey()), update(2, mark, { batch: 1 })], attempt(1))).json.results[1].status).toBe('checkpointed');
      // The producer coalesced two more checkpoint-only commits into the waiting update.
      expect((await send(url, [update(2, mark, { batch: 3 }, 2)], attempt(1))).json.results).toEqual([{ status: 'checkpointed', seq: 2, key: mark }]);
      expect(await mirror()).toEqual({ progress: { batch: 3 } });
      // An older revision that arrives late changes nothing.
      await send(url, [update(2, mark, { batch: 2 }, 1)], attempt(1));
      expect(await mirror()).toEqual({ progress: { batch: 3 } });
      // Once a later position holds the checkpoint, a revision of an earlier one is answered and ignored.
      await send(url, [item(3, newKey()), update(4, newKey(), { batch: 4 })], attempt(1));
      expect((await send(url, [update(2, mark, { batch: 9 }, 3)], attempt(1))).json.results[0].status).toBe('checkpointed');
      expect(await mirror()).toEqual({ progress: { batch: 4 } });
      // Sent twice in one request, the higher revision wins at a new position too.
      const fifth = newKey();
      await send(url, [update(5, fifth, { batch: 5 }, 1), update(5, fifth, { batch: 6 }, 2)], attempt(1));
      expect(await mirror()).toEqual({ progress: { batch: 6 } });
    });

    it('fences every item of an older attempt once a later one has delivered', async () => {
      const { url } = await startServer({ backend });
      const keys = Array.from({ length: 4 }, () => newKey());
      expect((await send(url, [item(1, keys[0]!), item(2, keys[1]!)], attempt(1))).json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'accepted']);
      // Attempt 2 re-sends batch 2 (a duplicate, with the original receipt) and a new batch 3.
      const second = await send(url, [item(1, keys[1]!, { partitionKey: 'batch-2' }), item(2, keys[2]!, { partitionKey: 'batch-3' })], attempt(2));
      expect(second.json.results.map((r: { status: string }) => r.status)).toEqual(['duplicate', 'accepted']);
      const zombie = await send(url, [item(3, keys[3]!), item(2, keys[1]!, { partitionKey: 'batch-2' })], attempt(1));
      expect(zombie.json.results).toEqual([
        { status: 'fenced', seq: 3, key: keys[3], code: 'fenced', epoch: 2, detail: 'fenced by attempt 2: attempt 1 of this run may deliver nothing more' },
        { status: 'fenced', seq: 2, key: keys[1], code: 'fenced', epoch: 2, detail: 'fenced by attempt 2: attempt 1 of this run may deliver nothing more' },
      ]);
      expect((await allEvents(url)).map((e) => [e.key, e.attempt])).toEqual([[keys[0], 1], [keys[1], 1], [keys[2], 2]]);
    });

    it.each([
      ['only duplicates of what its predecessor delivered', 'duplicates'],
      ['only a checkpoint update', 'checkpoint'],
      ['only an item refused for good', 'refused'],
    ] as const)('fences the zombie once a retry delivered a first request holding %s', async (_what, kind) => {
      const { url } = await startServer({ backend });
      const keys = [newKey(), newKey()];
      await send(url, [item(1, keys[0]!), item(2, keys[1]!, { partitionKey: 'batch-2' })], attempt(1));
      const first =
        kind === 'duplicates'
          ? [item(1, keys[0]!), item(2, keys[1]!, { partitionKey: 'batch-2' })]
          : kind === 'checkpoint'
            ? [{ seq: 1, key: newKey(), kind: 'checkpoint', name: 'backlog', value: { batch: 2 } }]
            : [item(1, newKey(), { asset: 'never_registered' })];
      const retried = await send(url, first, attempt(2));
      expect(retried.json.results.map((r: { status: string }) => r.status)).toEqual(
        kind === 'duplicates' ? ['duplicate', 'duplicate'] : kind === 'checkpoint' ? ['checkpointed'] : ['rejected'],
      );
      // The zombie's next batch, sent after the retry's first request was answered: fenced, not stored.
      const zombie = await send(url, [item(3, newKey(), { partitionKey: 'batch-3' })], attempt(1));
      expect(zombie.json.results).toEqual([expect.objectContaining({ status: 'fenced', seq: 3, epoch: 2 })]);
      expect((await allEvents(url)).map((e) => e.partitionKey)).toEqual(['batch-1', 'batch-2']);
    });

    it('fences a request of an older attempt that holds only checkpoint updates: the mirror never goes back', async () => {
      const { url } = await startServer({ backend });
      const checkpoint = (seq: number, batch: number) => ({ seq, key: newKey(), kind: 'checkpoint', name: 'backlog', value: { batch } });
      await send(url, [item(1, newKey()), checkpoint(2, 1)], attempt(1));
      await send(url, [item(1, newKey(), { partitionKey: 'batch-2' }), checkpoint(2, 2)], attempt(2));
      const zombie = await send(url, [checkpoint(3, 1)], attempt(1));
      expect(zombie.json.results).toEqual([expect.objectContaining({ status: 'fenced', seq: 3, epoch: 2 })]);
      const state = await (await fetch(`${url}/v1/streams/p/fence-run`)).json();
      expect(state).toMatchObject({ epoch: 2, checkpoints: { backlog: { batch: 2 } } });
    });

    it('refuses an attempt far above the epoch without moving it, so that the run can go on', async () => {
      const { url } = await startServer({ backend, maxAttemptStep: 10 });
      await send(url, [item(1, newKey())], attempt(1));
      const far = await send(url, [item(1, newKey())], attempt(1_000_000));
      expect(far.json.results[0]).toMatchObject({ status: 'rejected', code: 'attempt_too_high', field: 'stream.attempt' });
      expect((await send(url, [item(2, newKey())], attempt(1))).json.results[0].status).toBe('accepted');
      expect((await send(url, [item(1, newKey())], attempt(11))).json.results[0].status).toBe('accepted');
      const state = await (await fetch(`${url}/v1/streams/p/fence-run`)).json();
      expect(state).toMatchObject({ epoch: 11, attempts: [{ attempt: 1, lastSeq: 2 }, { attempt: 11, lastSeq: 1 }] });
    });

    it('does not move the epoch for a request that delivered nothing', async () => {
      const { url } = await startServer({ backend });
      await send(url, [item(1, newKey())], attempt(1));
      expect((await send(url, [item(5, newKey())], attempt(2))).json.results[0].status).toBe('gap');
      expect((await send(url, [item(2, newKey())], attempt(1))).json.results[0].status).toBe('accepted');
    });

    it('numbers each attempt from 1 and mirrors checkpoints in stream order', async () => {
      const { url } = await startServer({ backend });
      const checkpoint = (seq: number, value: unknown) => ({ seq, key: newKey(), kind: 'checkpoint', name: 'backlog', value });
      const first = await send(url, [item(1, newKey()), checkpoint(2, { batch: 1 }), item(3, newKey()), checkpoint(4, { batch: 2 })], attempt(1));
      expect(first.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'checkpointed', 'accepted', 'checkpointed']);
      const retry = await send(url, [checkpoint(4, { batch: 2 })].map((c) => ({ ...c, key: first.json.results[3].key })), attempt(1));
      expect(retry.json.results[0]).toEqual({ status: 'checkpointed', seq: 4, key: first.json.results[3].key });
      await send(url, [item(1, newKey()), checkpoint(2, { batch: 3 })], attempt(2));
      const state = await (await fetch(`${url}/v1/streams/p/fence-run`)).json();
      expect(state).toEqual({
        producer: 'p',
        runId: 'fence-run',
        task: null,
        epoch: 2,
        attempts: [{ attempt: 1, lastSeq: 4 }, { attempt: 2, lastSeq: 2 }],
        checkpoints: { backlog: { batch: 3 } },
      });
    });

    it('hands out claimed attempts atomically: 40 concurrent claims get 40 numbers, and the claim fences every lower attempt at once', async () => {
      const { url } = await startServer({ backend });
      await send(url, [item(1, newKey())], attempt(1));
      const claim = (body: object = {}) => post(`${url}/v1/streams/p/fence-run/attempts`, JSON.stringify(body));
      const claims = await Promise.all(Array.from({ length: 40 }, () => claim()));
      const numbers = claims.map((answer) => (answer.status === 201 ? answer.json.attempt : answer.status)).sort((a, b) => a - b);
      expect(numbers).toEqual(Array.from({ length: 40 }, (_, i) => i + 2));
      // The newest claim holds the epoch before it delivered anything: attempt 40 is a zombie now.
      expect((await send(url, [item(1, newKey())], attempt(40))).json.results[0]).toMatchObject({ status: 'fenced', epoch: 41 });
      expect((await send(url, [item(1, newKey())], attempt(41))).json.results[0].status).toBe('accepted');
      // atLeast: a consumer whose file saw attempt 99 never gets a lower number from a server that forgot.
      expect((await claim({ atLeast: 100 })).json).toEqual({ attempt: 100 });
      expect((await claim({ task: null })).json).toEqual({ attempt: 101 });
      // Another task of the run is its own stream.
      expect((await claim({ task: 'load' })).json).toEqual({ attempt: 1 });
      const bad = await claim({ atLeast: 0 });
      expect(bad.status).toBe(400);
      expect(bad.json).toMatchObject({ code: 'invalid_request', field: 'atLeast', detail: 'atLeast: must be at least 1' });
      // A bad `exactly` is told as such, not as a field the other shape of claim does not know.
      expect((await claim({ exactly: 1.5 })).json).toMatchObject({ code: 'invalid_request', field: 'exactly', detail: 'exactly: must be a whole number' });
    });

    it('claims exactly an attempt above the epoch, refuses one the epoch has reached as taken, and moves no epoch past maxAttemptStep', async () => {
      const { url } = await startServer({ backend, maxAttemptStep: 10 });
      const claim = (body: object) => post(`${url}/v1/streams/p/exact-run/attempts`, JSON.stringify(body));
      expect((await claim({ exactly: 3 })).json).toEqual({ attempt: 3 });
      // A late claim of a lower number, or of the same one, is refused with the epoch to go above.
      for (const exactly of [2, 3]) {
        const late = await claim({ exactly });
        expect(late.status).toBe(409);
        expect(late.json).toMatchObject({ code: 'attempt_taken', field: 'exactly', epoch: 3 });
      }
      expect((await send(url, [item(1, newKey())], { ...STREAM, runId: 'exact-run', attempt: 2 })).json.results[0]).toMatchObject({ status: 'fenced', epoch: 3 });
      expect((await claim({ exactly: 4 })).json).toEqual({ attempt: 4 });
      // No claim may put the epoch where the run's next delivery would be refused.
      for (const body of [{ exactly: 15 }, { atLeast: 15 }]) {
        const far = await claim(body);
        expect(far.status).toBe(409);
        expect(far.json).toMatchObject({ code: 'attempt_too_high', epoch: 4 });
      }
      expect((await claim({})).json).toEqual({ attempt: 5 });
      const both = await claim({ atLeast: 6, exactly: 6 });
      expect(both.status).toBe(400);
      expect(both.json).toMatchObject({ code: 'invalid_request', field: 'exactly' });
      // 20 concurrent exact claims of the next numbers: each granted at most once, and the epoch is the highest granted.
      const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => claim({ exactly: 6 + (i % 5) })));
      const granted = answers.filter((answer) => answer.status === 201).map((answer) => answer.json.attempt as number);
      expect(new Set(granted).size).toBe(granted.length);
      expect(answers.every((answer) => answer.status === 201 || answer.json.code === 'attempt_taken')).toBe(true);
      expect((await claim({ exactly: Math.max(...granted) })).json).toMatchObject({ code: 'attempt_taken', epoch: Math.max(...granted) });
    });

    it("derives each event's lineage from its cause, and refuses a feedback loop and a chain past the depth limit", async () => {
      const { url } = await startServer({ backend, assets: ['a', 'b', 'daily'], lineage: { maxDepth: 3, cycles: { daily: 5 } } });
      const stream = (producer: string) => ({ ...STREAM, producer });
      const cursorOf = async (key: string) => (await allEvents(url)).find((e) => e.key === key)!.cursor;
      const root = newKey();
      await send(url, [item(1, root, { asset: 'a', partitionKey: 'p1' })], stream('source'));
      const child = newKey();
      const derived = await send(url, [item(1, child, { asset: 'b', partitionKey: 'p1', cause: { cursor: await cursorOf(root) } })], stream('c1'));
      expect(derived.json.results[0].status).toBe('accepted');
      const events = await allEvents(url);
      expect(events.map((e) => [e.asset, e.depth, e.causedBy])).toEqual([
        ['a', 0, null],
        ['b', 1, events[0]!.eventId],
      ]);
      // b/p1 → a/p1 again: the lineage a/p1 → b/p1 already holds it.
      const loop = await send(url, [item(1, newKey(), { asset: 'a', partitionKey: 'p1', cause: { cursor: await cursorOf(child) } })], stream('c2'));
      expect(loop.json.results[0]).toMatchObject({ status: 'rejected', code: 'feedback_loop', field: 'cause' });
      expect(loop.json.results[0].detail).toContain('this event ("a"/"p1") would repeat an asset and partition of its own lineage above event 2');
      // The refusal took its position: a retry gets the same answer, and the stream goes on.
      expect((await send(url, [item(1, loop.json.results[0].key, { asset: 'a', partitionKey: 'p1', cause: { cursor: 2 } })], stream('c2'))).json.results[0].code).toBe('feedback_loop');
      // Another partition is no loop, but the depth limit (3) stops the chain.
      let cause = await cursorOf(child);
      const depths: string[] = [];
      for (let step = 2; step <= 4; step++) {
        const key = newKey();
        const answer = await send(url, [item(1, key, { asset: step % 2 ? 'b' : 'a', partitionKey: `p${step}`, cause: { cursor: cause } })], stream(`deep${step}`));
        depths.push(answer.json.results[0].status === 'accepted' ? `depth ${step}` : answer.json.results[0].code);
        if (answer.json.results[0].status === 'accepted') cause = await cursorOf(key);
      }
      expect(depths).toEqual(['depth 2', 'depth 3', 'lineage_too_deep']);
      // An allowed cycle repeats its own asset and partition, up to its own limit (5).
      const cycle: string[] = [];
      let last = newKey();
      await send(url, [item(1, last, { asset: 'daily', partitionKey: 'd' })], stream('day0'));
      for (let day = 1; day <= 6; day++) {
        const key = newKey();
        const answer = await send(url, [item(1, key, { asset: 'daily', partitionKey: 'd', cause: { cursor: await cursorOf(last) } })], stream(`day${day}`));
        cycle.push(answer.json.results[0].status === 'accepted' ? 'ok' : answer.json.results[0].code);
        if (answer.json.results[0].status === 'accepted') last = key;
      }
      expect(cycle).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'lineage_too_deep']);
      // A cause the server does not hold starts a new lineage; a malformed one is refused by itself.
      expect((await send(url, [item(1, newKey(), { asset: 'a', partitionKey: 'x', cause: { cursor: 999_999 } })], stream('orphan'))).json.results[0].status).toBe('accepted');
      const malformed = await send(url, [item(1, newKey(), { asset: 'a', cause: { cursor: 'one' } })], stream('malformed'));
      expect(malformed.json.results[0]).toMatchObject({ status: 'rejected', code: 'invalid_item', field: 'items[0].cause.cursor' });
    });

    it('rejects a malformed checkpoint item by itself, and answers an unknown stream with 404', async () => {
      const { url } = await startServer({ backend });
      const bad = await send(url, [{ seq: 1, key: newKey(), kind: 'checkpoint', name: '', value: 1 }, { seq: 2, key: newKey(), kind: 'checkpoint', name: 'x' }], attempt(1));
      expect(bad.json.results.map((r: { code: string; field: string }) => [r.code, r.field])).toEqual([
        ['invalid_item', 'items[0].name'],
        ['invalid_item', 'items[1].value'],
      ]);
      const missing = await fetch(`${url}/v1/streams/p/never-ran?task=t`);
      expect(missing.status).toBe(404);
      expect(await missing.json()).toMatchObject({ code: 'not_found', detail: 'no stream p/never-ran task t has delivered to this server' });
    });
  });
    describe('concurrency and retention', () => {
      it('gives the same key from 16 concurrent clients one event and 16 identical receipts', async () => {
        const server = await startServer({ backend });
        const key = newKey();
        const answers = await Promise.all(
          Array.from({ length: 16 }, (_, client) =>
            post(emissions(server.url), JSON.stringify({ stream: { ...STREAM, runId: `client-${client}` }, items: [item(1, key)] })),
          ),
        );
        const receipts = answers.map((answer) => answer.json.results[0]);
        expect(receipts.filter((receipt) => receipt.status === 'accepted')).toHaveLength(1);
        expect(receipts.filter((receipt) => receipt.status === 'duplicate')).toHaveLength(15);
        expect(new Set(receipts.map((receipt) => `${receipt.eventId} ${receipt.timestamp}`)).size).toBe(1);
        expect(await server.events()).toHaveLength(1);
      });

      it('compacts dedupe records past the window and keeps fresh ones; events have their own retention', async () => {
        const DAY = 24 * 60 * 60 * 1000;
        let clock = Date.parse('2026-01-01T00:00:00Z');
        const server = await startServer({ backend, now: () => new Date(clock), eventRetentionMs: 40 * DAY, compactEveryMs: 0 });
        const [old, fresh] = [newKey(), newKey()];
        const run = (runId: string, seq: number, key: string) => send(server.url, [item(seq, key, { partitionKey: key })], { ...STREAM, runId });
        expect((await run('a', 1, old)).json.results[0].status).toBe('accepted');
        // A rejection is recorded in the stream, and ages out with the dedupe records.
        const rejected = await send(server.url, [item(2, newKey(), { asset: 'unregistered' })], { ...STREAM, runId: 'a' });
        expect(rejected.json.results[0].status).toBe('rejected');
        clock += 29 * DAY;
        expect((await run('b', 1, fresh)).json.results[0].status).toBe('accepted');
        // Inside the 30-day window a retry is still deduplicated.
        expect((await run('c', 1, old)).json.results[0].status).toBe('duplicate');
        clock += 2 * DAY;
        expect(await server.server.compact()).toEqual({ dedupeRecords: 1, events: 0, outcomes: 1, streams: 1 });
        expect((await run('c', 2, fresh)).json.results[0].status).toBe('duplicate');
        // Past the window the record is gone: this is why retention must exceed the retry horizon.
        expect((await run('c', 3, old)).json.results[0].status).toBe('accepted');
        clock += 10 * DAY;
        expect(await server.server.compact()).toEqual({ dedupeRecords: 0, events: 1, outcomes: 0, streams: 0 });
        expect((await server.events()).map((event) => event.key)).toEqual([fresh, old]);
      });

      it('keeps the dedupe record of an event removed by a shorter event retention: a retry is still a duplicate, with its first receipt', async () => {
        const DAY = 24 * 60 * 60 * 1000;
        let clock = Date.parse('2026-01-01T00:00:00Z');
        const server = await startServer({ backend, now: () => new Date(clock), eventRetentionMs: 10 * DAY, compactEveryMs: 0 });
        const key = newKey();
        const run = (runId: string, seq: number) => send(server.url, [item(seq, key, { partitionKey: 'kept' })], { ...STREAM, runId });
        const first = (await run('a', 1)).json.results[0];
        expect(first.status).toBe('accepted');
        expect((await run('b', 1)).json.results[0].status).toBe('duplicate');
        clock += 11 * DAY;
        expect(await server.server.compact()).toEqual({ dedupeRecords: 0, events: 1, outcomes: 0, streams: 0 });
        expect(await server.events()).toEqual([]);
        // PostgreSQL's sizes are the planner's estimates.
        if (backend === 'sqlite') expect(await server.server.store.sizes()).toMatchObject({ events: 0, dedupeRecords: 1 });
        // The event is gone, its record is not: a retry inside the 30-day window gets the receipt it was given.
        expect((await run('c', 1)).json.results[0]).toEqual({ ...first, status: 'duplicate' });
        const changed = await send(server.url, [item(2, key, { partitionKey: 'other' })], { ...STREAM, runId: 'c' });
        expect(changed.json.results[0]).toMatchObject({ status: 'conflict', code: 'key_conflict' });
        clock += 20 * DAY;
        expect(await server.server.compact()).toMatchObject({ dedupeRecords: 1, events: 0 });
        // Past the window the record is gone too, as for an event still stored.
        expect((await run('d', 1)).json.results[0].status).toBe('accepted');
      });

      it('forgets the state of streams idle past their retention, with their positions and checkpoints, and keeps active ones', async () => {
        const DAY = 24 * 60 * 60 * 1000;
        let clock = Date.parse('2026-01-01T00:00:00Z');
        const server = await startServer({ backend, now: () => new Date(clock), compactEveryMs: 0, streamRetentionMs: 10 * DAY });
        const stream = (runId: string) => ({ ...STREAM, runId });
        const checkpoint = (seq: number) => ({ seq, key: newKey(), kind: 'checkpoint', name: 'backlog', value: { batch: seq } });
        await send(server.url, [item(1, newKey()), checkpoint(2)], stream('idle'));
        await send(server.url, [item(1, newKey()), checkpoint(2)], stream('active'));
        expect((await post(`${server.url}/v1/streams/p/claimed-only/attempts`, '{}')).status).toBe(201);
        clock += 8 * DAY;
        // A request to a stream is activity, whatever it stores.
        await send(server.url, [checkpoint(3)], stream('active'));
        clock += 3 * DAY;
        expect(await server.server.compact()).toMatchObject({ streams: 2 });
        expect(await server.server.store.streamState('p', 'idle', null)).toBeUndefined();
        expect(await server.server.store.streamState('p', 'active', null)).toMatchObject({ epoch: 1, checkpoints: { backlog: { batch: 3 } } });
        // The forgotten claim starts over: a new claim is attempt 1 again.
        expect((await post(`${server.url}/v1/streams/p/claimed-only/attempts`, '{}')).json).toEqual({ attempt: 1 });
        expect(await server.server.compact()).toMatchObject({ streams: 0 });
      });

      it('caps the new streams one token opens per minute, by delivery or claim, and never the streams it has', async () => {
        const server = await startServer({ backend, newStreamsPerMinute: 3 });
        const token = (await server.server.store.tokens.create({ scope: 'publish', producers: 'p' })).token;
        const auth = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
        const deliver = (runId: string, seq = 1) => post(`${server.url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, runId }, items: [item(seq, newKey())] }), auth);
        for (const runId of ['s1', 's2']) expect((await deliver(runId)).status).toBe(200);
        expect((await post(`${server.url}/v1/streams/p/s3/attempts`, '{}', auth)).status).toBe(201);
        const fourth = await deliver('s4');
        expect(fourth.status).toBe(429);
        expect(fourth.json).toMatchObject({ code: 'rate_limited' });
        expect(fourth.json.detail).toContain('new streams');
        expect((await post(`${server.url}/v1/streams/p/s5/attempts`, '{}', auth)).status).toBe(429);
        // Refused whole: nothing of s4 was kept.
        expect(await server.server.store.streamState('p', 's4', null)).toBeUndefined();
        // The streams it opened go on.
        expect((await deliver('s1', 2)).status).toBe(200);
        expect((await post(`${server.url}/v1/streams/p/s3/attempts`, '{}', auth)).status).toBe(201);
      });

      it('keeps the stream outcomes recorded inside the window: a retry there gets its first answer', async () => {
        const DAY = 24 * 60 * 60 * 1000;
        let clock = Date.parse('2026-01-01T00:00:00Z');
        const server = await startServer({ backend, now: () => new Date(clock), compactEveryMs: 0 });
        const stream = { ...STREAM, runId: 'outcomes' };
        const old = [item(1, newKey(), { asset: 'unregistered' })];
        expect((await send(server.url, old, stream)).json.results[0].status).toBe('rejected');
        clock += 20 * DAY;
        const fresh = [
          item(2, newKey()),
          { seq: 3, key: newKey(), kind: 'checkpoint', name: 'backlog', value: { batch: 2 } },
          item(4, newKey(), { asset: 'unregistered' }),
        ];
        const first = await send(server.url, fresh, stream);
        expect(first.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'checkpointed', 'rejected']);
        clock += 11 * DAY; // the first rejection is 31 days old, the rest 11
        expect(await server.server.compact()).toEqual({ dedupeRecords: 0, events: 0, outcomes: 1, streams: 0 });
        const retry = await send(server.url, fresh, stream);
        expect(retry.json.results).toEqual([{ ...first.json.results[0], status: 'duplicate' }, first.json.results[1], first.json.results[2]]);
      });
    });
  });
}
