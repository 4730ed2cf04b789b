import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createServer, SqliteDedupeStore } from '../../src/dedupe/index.js';
import { checkItem } from '../../src/dedupe/item-check.js';
import { serverSqliteMigrations } from '../../src/dedupe/sqlite/migrations.js';
import { SchemaTooNewError } from '../../src/protocol/errors.js';
import { tempDir } from '../support/temp.js';

/** What only the embedded SQLite store has to get right. */
describe('the SQLite store', () => {
  it('fsyncs every commit unless told otherwise', async () => {
    const store = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    // synchronous is per connection: read it on the store's own (2 is FULL).
    expect((store as unknown as { db: Database.Database }).db.pragma('synchronous', { simple: true })).toBe(2);
    await store.close();
    await store.close();
  });

  it('bounds attempt jumps at 1000 when built without the option, and at the step it is given', async () => {
    const stream = { producer: 'p', workflow: 'w', runId: 'r', task: null };
    const one = (seq: number) => [checkItem({ seq, key: randomUUID(), kind: 'checkpoint', name: 'c', value: seq }, 0)];
    const plain = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    expect((await plain.ingest({ ...stream, attempt: 1001 }, one(1)))[0]).toMatchObject({ status: 'rejected', code: 'attempt_too_high' });
    expect((await plain.ingest({ ...stream, attempt: 1000 }, one(1)))[0]).toMatchObject({ status: 'checkpointed' });
    await plain.close();
    const tight = new SqliteDedupeStore({ path: join(tempDir(), 'server.db'), maxAttemptStep: 5 });
    expect((await tight.ingest({ ...stream, attempt: 6 }, one(1)))[0]).toMatchObject({ code: 'attempt_too_high' });
    await tight.close();
  });

  it('commits the requests that arrive together in one transaction, and a request that fails there undoes only itself', async () => {
    const path = join(tempDir(), 'server.db');
    const store = new SqliteDedupeStore({ path });
    await store.registerAsset('batch_ready');
    const stream = (runId: string) => ({ producer: 'p', workflow: 'w', runId, task: null, attempt: 1 });
    const events = (count: number) => Array.from({ length: count }, (_, i) => checkItem({ seq: i + 1, key: randomUUID(), kind: 'event', asset: 'batch_ready', partitionKey: `b${i}` }, i));
    const [failing, fine] = [events(3), events(2)];
    // The failing request writes its events, then fails on its stream position: its savepoint goes, the other's writes stay.
    const db = new Database(path);
    db.exec(`CREATE TRIGGER fail_position BEFORE INSERT ON stream_seqs WHEN NEW.run_id = 'fail-me' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`);
    const before = store.groupCommits;
    const answers = await Promise.allSettled([store.ingest(stream('fail-me'), failing), store.ingest(stream('fine'), fine), store.ingest(stream('fine-too'), events(1))]);
    expect(store.groupCommits - before).toBe(1);
    expect(answers.map((answer) => answer.status)).toEqual(['rejected', 'fulfilled', 'fulfilled']);
    expect(String((answers[0] as PromiseRejectedResult).reason)).toContain('injected failure');
    expect((await store.listEvents({ after: 0, limit: 10 })).events.map((event) => event.runId)).toEqual(['fine', 'fine', 'fine-too']);
    db.exec('DROP TRIGGER fail_position');
    db.close();
    // Nothing of the failed request was kept: its retry is new, not a duplicate.
    expect((await store.ingest(stream('fail-me'), failing)).map((result) => result.status)).toEqual(['accepted', 'accepted', 'accepted']);
    await store.close();
  });

  it('refuses a file whose schema is newer than this code knows', async () => {
    const path = join(tempDir(), 'server.db');
    const db = new Database(path);
    db.pragma('user_version = 99');
    db.close();
    const opening = createServer({ db: path });
    await expect(opening).rejects.toBeInstanceOf(SchemaTooNewError);
    await expect(opening).rejects.toMatchObject({
      code: 'schema_too_new',
      message: `${path} (server store): schema version 99 is newer than this oncebox knows (${serverSqliteMigrations.length}). A newer oncebox migrated it; upgrade oncebox rather than opening it with an older one.`,
    });
  });
});

describe('the SQLite store upgraded to keys scoped by producer (migration 005)', () => {
  it("keeps every record, attributed to its event's producer, so an old key's retry is still a duplicate", async () => {
    const { migrateSqlite } = await import('../../src/sqlite/migrate.js');
    const { item, post, STREAM } = await import('../support/http.js');
    const path = join(tempDir(), 'server.db');
    const db = new Database(path);
    migrateSqlite(db, serverSqliteMigrations.slice(0, 4), () => new Error('too new'));
    const key = '11111111-1111-4111-8111-111111111111';
    const orphan = '22222222-2222-4222-8222-222222222222';
    db.prepare("INSERT INTO dedupe (key, fingerprint, event_id, ts, created_at) VALUES (?, ?, 'e-1', '2026-11-29T00:00:00.000Z', ?)").run(key, 'will-be-read', Date.now());
    db.prepare("INSERT INTO dedupe (key, fingerprint, event_id, ts, created_at) VALUES (?, 'f', 'e-gone', 't', ?)").run(orphan, Date.now());
    db.prepare(
      `INSERT INTO events (event_id, key, ts, asset, producer, workflow, run_id, task, attempt, seq)
       VALUES ('e-1', ?, '2026-11-29T00:00:00.000Z', 'batch_ready', ?, 'w', 'old-run', NULL, 1, 1)`,
    ).run(key, STREAM.producer);
    db.close();
    // The fingerprint the store computes for this item, so that the retry below is a true duplicate.
    const { checkItem } = await import('../../src/dedupe/item-check.js');
    const sent = item(1, key);
    const fingerprint = (checkItem(sent, 0) as { fingerprint: string }).fingerprint;
    const raw = new Database(path);
    raw.prepare('UPDATE dedupe SET fingerprint = ? WHERE key = ?').run(fingerprint, key);
    raw.close();

    const server = await createServer({ db: path, assets: ['batch_ready'] });
    const url = await server.listen();
    const retry = await post(`${url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, runId: 'new-run' }, items: [sent] }));
    expect(retry.json.results[0]).toMatchObject({ status: 'duplicate', eventId: 'e-1' });
    await server.close();
    const after = new Database(path, { readonly: true });
    // Since migration 012 a record whose event is stored lives on the event's row; the orphan stays apart.
    const records = after.prepare('SELECT producer, key FROM events WHERE created_at IS NOT NULL UNION ALL SELECT producer, key FROM dedupe ORDER BY key');
    expect(records.all()).toEqual([
      { producer: STREAM.producer, key },
      { producer: '', key: orphan },
    ]);
    after.close();
  });
});

describe('the SQLite store upgraded to one row per event (migration 012)', () => {
  it('moves each record onto its event and keeps the rest: duplicates, conflicts, expired keys, streams and counts answer as before', async () => {
    const { migrateSqlite } = await import('../../src/sqlite/migrate.js');
    const { item, post, STREAM } = await import('../support/http.js');
    const path = join(tempDir(), 'server.db');
    const db = new Database(path);
    migrateSqlite(db, serverSqliteMigrations.slice(0, 11), () => new Error('too new'));
    const [recorded, expired, again, orphan] = ['11111111-1111-4111-8111-111111111111', '22222222-2222-4222-8222-222222222222', '33333333-3333-4333-8333-333333333333', '44444444-4444-4444-8444-444444444444'];
    const sent = (seq: number, key: string) => item(seq, key, { partitionKey: key.slice(0, 1) });
    const fingerprint = (seq: number, key: string) => (checkItem(sent(seq, key), 0) as { fingerprint: string }).fingerprint;
    const event = db.prepare(
      `INSERT INTO events (event_id, key, ts, asset, partition_key, producer, workflow, run_id, task, attempt, seq)
       VALUES (?, ?, ?, 'batch_ready', ?, 'p', 'w', 'old-run', NULL, 1, ?)`,
    );
    const record = db.prepare('INSERT INTO dedupe (producer, key, fingerprint, event_id, ts, created_at, duplicates) VALUES (?, ?, ?, ?, ?, ?, ?)');
    const now = Date.now();
    event.run('e-recorded', recorded, '2026-11-29T00:00:00.000Z', '1', 1);
    record.run('p', recorded, fingerprint(1, recorded), 'e-recorded', '2026-11-29T00:00:00.000Z', now, 2);
    // Its record expired (dedupe retention shorter than event retention): the key was free again.
    event.run('e-expired', expired, '2026-10-01T00:00:00.000Z', '2', 2);
    // Stored again after its first record expired: two events, the record names the newer.
    event.run('e-again-old', again, '2026-10-01T00:00:00.000Z', '3', 3);
    event.run('e-again-new', again, '2026-11-29T00:00:00.000Z', '3', 4);
    record.run('p', again, fingerprint(4, again), 'e-again-new', '2026-11-29T00:00:00.000Z', now, 0);
    // Its event was removed by event retention: the record outlives it.
    record.run('p', orphan, fingerprint(5, orphan), 'e-gone', '2026-11-28T00:00:00.000Z', now, 0);
    db.prepare("INSERT INTO streams (producer, run_id, task, epoch, updated_at) VALUES ('p', 'old-run', '', 1, '2026-11-29T00:00:00.000Z')").run();
    db.prepare("INSERT INTO stream_seqs (producer, run_id, task, attempt, last_seq) VALUES ('p', 'old-run', '', 1, 4)").run();
    db.close();

    const server = await createServer({ db: path, assets: ['batch_ready'] });
    const url = await server.listen();
    const deliver = async (runId: string, seq: number, key: string, fields: Record<string, unknown> = { partitionKey: key.slice(0, 1) }) =>
      (await post(`${url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, runId }, items: [item(seq, key, fields)] }))).json.results[0];
    expect(await server.store.sizes()).toEqual({ events: 4, dedupeRecords: 3 });
    expect(await deliver('retry', 1, recorded)).toMatchObject({ status: 'duplicate', eventId: 'e-recorded', timestamp: '2026-11-29T00:00:00.000Z' });
    expect(await deliver('retry', 2, again)).toMatchObject({ status: 'duplicate', eventId: 'e-again-new' });
    expect(await deliver('retry', 3, orphan)).toMatchObject({ status: 'duplicate', eventId: 'e-gone', timestamp: '2026-11-28T00:00:00.000Z' });
    expect(await deliver('retry', 4, recorded, { partitionKey: 'changed' })).toMatchObject({ status: 'conflict' });
    // A key whose record had expired is new again, as it was before the upgrade.
    expect(await deliver('retry', 5, expired)).toMatchObject({ status: 'accepted' });
    // The old stream goes on where it was.
    expect(await deliver('old-run', 5, '55555555-5555-4555-8555-555555555555')).toMatchObject({ status: 'accepted' });
    expect((await server.store.streamState('p', 'old-run', null))?.attempts).toEqual([{ attempt: 1, lastSeq: 5 }]);
    // The duplicates absorbed before the upgrade are still counted, with the one absorbed after it.
    const partitions = await server.store.catalog.partitions('batch_ready', { limit: 10 });
    expect(partitions?.items.find((partition) => partition.partitionKey === '1')).toMatchObject({ events: 1, duplicates: 3 });
    await server.close();
  });
  it('answers the keys stored before keys were filed by run as before, when a newer relay sends them as its run\'s (migration 013)', async () => {
    const { migrateSqlite } = await import('../../src/sqlite/migrate.js');
    const { item, post, STREAM } = await import('../support/http.js');
    const path = join(tempDir(), 'server.db');
    const db = new Database(path);
    migrateSqlite(db, serverSqliteMigrations.slice(0, 12), () => new Error('too new'));
    const stored = '66666666-6666-4666-8666-666666666666';
    const sent = item(1, stored, { partitionKey: 'batch-1' });
    db.prepare(
      `INSERT INTO events (event_id, key, ts, asset, partition_key, producer, workflow, run_id, task, attempt, seq, fingerprint, created_at)
       VALUES ('e-stored', ?, '2026-12-01T00:00:00.000Z', 'batch_ready', 'batch-1', 'p', 'w', 'r1', NULL, 1, 1, ?, ?)`,
    ).run(stored, (checkItem(sent, 0) as { fingerprint: string }).fingerprint, Date.now());
    db.close();

    const server = await createServer({ db: path, assets: ['batch_ready'] });
    const url = await server.listen();
    const deliver = async (attempt: number, fields: Record<string, unknown>, runKeys: Record<string, string> = { 'oncebox-run-keys': '0' }) =>
      (await post(`${url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, attempt }, items: [{ ...sent, ...fields }] }), { 'content-type': 'application/json', ...runKeys })).json
        .results[0];
    // The retry of a run after the upgrade says the key is the run's: it is still the stored event.
    expect(await deliver(2, {})).toMatchObject({ status: 'duplicate', eventId: 'e-stored', timestamp: '2026-12-01T00:00:00.000Z' });
    expect(await deliver(3, { extra: { rows: 1 } })).toMatchObject({ status: 'conflict' });
    expect(await deliver(4, {}, {})).toMatchObject({ status: 'duplicate', eventId: 'e-stored' });
    expect(await server.store.sizes()).toMatchObject({ events: 1 });
    const partitions = await server.store.catalog.partitions('batch_ready', { limit: 10 });
    expect(partitions?.items).toEqual([expect.objectContaining({ partitionKey: 'batch-1', events: 1, duplicates: 2 })]);
    await server.close();
  });
  it("files a key said to be the run's by its run and partition: misused for a key sent with another partition, it makes another event, never another producer's", async () => {
    const { item, post, STREAM } = await import('../support/http.js');
    const server = await createServer({ db: join(tempDir(), 'server.db'), assets: ['batch_ready'] });
    const url = await server.listen();
    const key = '77777777-7777-4777-8777-777777777777';
    const deliver = async (stream: object, fields: Record<string, unknown>, runKeys: Record<string, string> = { 'oncebox-run-keys': '0' }) =>
      (await post(`${url}/v1/emissions`, JSON.stringify({ stream, items: [item(1, key, fields)] }), { 'content-type': 'application/json', ...runKeys })).json.results[0];
    const first = await deliver(STREAM, { partitionKey: 'a' });
    expect(first).toMatchObject({ status: 'accepted' });
    // The same partition, said or not: the same event.
    expect(await deliver({ ...STREAM, attempt: 2 }, { partitionKey: 'a' }, {})).toEqual({ ...first, status: 'duplicate' });
    // A derived key never comes with another partition; a client that sends one so gets an event per place
    // (on both stores), of its own producer only.
    expect(await deliver({ ...STREAM, attempt: 3 }, { partitionKey: 'b' })).toMatchObject({ status: 'accepted' });
    expect(await deliver({ ...STREAM, producer: 'other' }, { partitionKey: 'a' })).toMatchObject({ status: 'accepted' });
    expect(await server.store.sizes()).toMatchObject({ events: 3 });
    await server.close();
  });
});
