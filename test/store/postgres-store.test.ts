import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PostgresDedupeStore } from '../../src/dedupe/index.js';
import { checkItem } from '../../src/dedupe/item-check.js';
import { createPool, inTransaction } from '../../src/dedupe/postgres/connection.js';
import { item, newKey, post, STREAM } from '../support/http.js';
import { PG_URL, pgAvailable, pgSkipReason, testSchema } from '../support/postgres.js';
import { startServer } from '../support/server.js';

/**
 * What only the PostgreSQL store has to get right: several instances over one schema, in this process
 * (test/fault/postgres-cluster.test.ts runs them as separate server processes).
 */
describe.skipIf(!pgAvailable)(`the PostgreSQL store with two instances on one schema${pgSkipReason}`, () => {
  const twoInstances = async (assets: string[] = ['batch_ready']) => {
    const schema = testSchema();
    const a = await startServer({ backend: 'postgres', db: PG_URL, schema, assets });
    const b = await startServer({ backend: 'postgres', db: PG_URL, schema, assets: [] });
    return [a, b] as const;
  };
  const send = (url: string, items: unknown[], runId = 'r1') =>
    post(`${url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, runId }, items }));

  it("reads bigints as numbers on its own pool only, leaving pg's global type parsers to the application", async () => {
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema: testSchema() });
    const stream = { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 };
    const [first, third] = [1, 3].map((seq) => checkItem({ seq, key: randomUUID(), kind: 'checkpoint', name: 'c', value: seq }, 0));
    await store.ingest(stream, [first!]);
    // The stored last seq read as the string "1" would make the next expected seq "11", and seq 3 no gap.
    expect((await store.ingest(stream, [third!]))[0]).toEqual({ status: 'gap', seq: 3, key: third!.key, expectedSeq: 2 });
    const plain = new pg.Client({ connectionString: PG_URL });
    await plain.connect();
    const { rows } = await plain.query('SELECT 9007199254740993::bigint AS big');
    await plain.end();
    await store.close();
    expect(rows[0].big).toBe('9007199254740993');
  });

  it('never deadlocks two ingests claiming the same keys in opposite orders', async () => {
    const schema = testSchema();
    // Two instances: each runs one group transaction at a time, so the ingests meet across them.
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    await store.registerAsset('batch_ready');
    const other = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    const deadlocksBefore = async () => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      const { rows } = await client.query('SELECT deadlocks::int AS n FROM pg_stat_database WHERE datname = current_database()');
      await client.end();
      return rows[0].n as number;
    };
    const before = await deadlocksBefore();
    try {
      for (let round = 0; round < 6; round++) {
        const keys = Array.from({ length: 3000 }, () => randomUUID());
        const answers = await Promise.all(
          [keys, [...keys].reverse()].map((ordered, client) =>
            [store, other][client]!.ingest(
              { producer: 'p', workflow: 'w', runId: `round-${round}-${client}`, task: null, attempt: 1 },
              ordered.map((key, i) => checkItem({ seq: i + 1, key, kind: 'event', asset: 'batch_ready', partitionKey: key }, i)),
            ),
          ),
        );
        const accepted = answers.flatMap((results) => results.filter((r) => r.status === 'accepted').map((r) => r.key));
        expect(accepted.sort()).toEqual([...keys].sort());
      }
    } finally {
      await store.close();
      await other.close();
    }
    // PostgreSQL reports its statistics within a second or so of a transaction's end.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(await deadlocksBefore()).toBe(before);
  });

  it('runs a transaction that PostgreSQL aborted for a deadlock again, rather than failing the request', async () => {
    const pool = createPool({ connectionString: PG_URL, max: 4 });
    const table = `deadlock_${process.pid}_${Date.now()}`;
    try {
      await pool.query(`CREATE TABLE ${table} (id int PRIMARY KEY, n int NOT NULL); INSERT INTO ${table} VALUES (1, 0), (2, 0)`);
      // Each takes one row, waits until the other holds its own, then asks for the other's: a real deadlock,
      // which PostgreSQL breaks after deadlock_timeout by aborting one of the two (40P01).
      let held = 0;
      let tries = 0;
      const bothHold = async () => {
        held++;
        while (held < 2) await new Promise((resolve) => setTimeout(resolve, 10));
      };
      const crosswise = (first: number, second: number) =>
        inTransaction(pool, async (client) => {
          tries++;
          await client.query(`UPDATE ${table} SET n = n + 1 WHERE id = $1`, [first]);
          if (tries <= 2) await bothHold();
          await client.query(`UPDATE ${table} SET n = n + 1 WHERE id = $1`, [second]);
        });
      await Promise.all([crosswise(1, 2), crosswise(2, 1)]);
      // At least one ran again; on a busy machine both may be aborted (each one's deadlock check can run
      // before the other's abort has released its lock), and both then run again.
      expect(tries).toBeGreaterThanOrEqual(3);
      const { rows } = await pool.query(`SELECT n FROM ${table} ORDER BY id`);
      expect(rows.map((row) => row.n)).toEqual([2, 2]);
    } finally {
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.end();
    }
  });

  it('bounds attempt jumps at 1000 when opened without the option, and at the step it is given', async () => {
    const stream = { producer: 'p', workflow: 'w', runId: 'r', task: null };
    const one = (seq: number) => [checkItem({ seq, key: randomUUID(), kind: 'checkpoint', name: 'c', value: seq }, 0)];
    const plain = await PostgresDedupeStore.open({ connectionString: PG_URL, schema: testSchema() });
    expect((await plain.ingest({ ...stream, attempt: 1001 }, one(1)))[0]).toMatchObject({ status: 'rejected', code: 'attempt_too_high' });
    expect((await plain.ingest({ ...stream, attempt: 1000 }, one(1)))[0]).toMatchObject({ status: 'checkpointed' });
    await plain.close();
    const tight = await PostgresDedupeStore.open({ connectionString: PG_URL, schema: testSchema(), maxAttemptStep: 5 });
    expect((await tight.ingest({ ...stream, attempt: 6 }, one(1)))[0]).toMatchObject({ code: 'attempt_too_high' });
    await tight.close();
  });

  it("stores each event's trace context, and reports its sizes from PostgreSQL's statistics", async () => {
    const schema = testSchema();
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    await store.registerAsset('batch_ready');
    const stream = { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 };
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' };
    await store.ingest(
      stream,
      [1, 2, 3].map((seq) => checkItem({ seq, key: randomUUID(), kind: 'event', asset: 'batch_ready', partitionKey: `b${seq}`, ...(seq === 2 ? { trace } : {}) }, 0)),
    );
    expect((await store.listEvents({ after: 0, limit: 10 })).events.map((event) => event.trace)).toEqual([null, trace, null]);
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    // One more dedupe record than events, so that the two sizes cannot be mistaken for each other.
    await admin.query(`INSERT INTO "${schema}".dedupe (producer, key, fingerprint, event_id, ts, created_at) VALUES ('p', $1, 'f', $1, 't', 0)`, [randomUUID()]);
    await admin.query(`ANALYZE "${schema}".events, "${schema}".dedupe`);
    await admin.end();
    expect(await store.sizes()).toEqual({ events: 3, dedupeRecords: 4 });
    await store.close();
  });

  it('goes on serving waiting readers, at its look-again interval, when its LISTEN connection is killed', async () => {
    const [a, b] = await twoInstances();
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    // The LISTEN connections of this schema (both instances'): the stores survive losing them.
    const { advisoryKey } = await import('../../src/dedupe/postgres/migrate.js');
    const channel = `oncebox_events_${advisoryKey((a.server.store as PostgresDedupeStore).schema, 'events')}`;
    const killed = await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1', [`LISTEN ${channel}`]);
    expect(killed.rowCount).toBe(2);
    await admin.end();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const waiting = fetch(`${b.url}/v1/events?after=0&wait=20`).then(async (response) => (await response.json()) as { events: { seq: number }[] });
    await send(a.url, [item(1, newKey())]);
    expect((await waiting).events.map((event) => event.seq)).toEqual([1]);
  }, 120_000);

  it('wakes a reader waiting on one instance when the other stores an event (LISTEN/NOTIFY)', async () => {
    const [a, b] = await twoInstances();
    const waiting = fetch(`${b.url}/v1/events?after=0&wait=20`).then(async (response) => ({ at: Date.now(), page: (await response.json()) as { events: { seq: number }[] } }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    await send(a.url, [item(1, newKey())]);
    // a has answered: the transaction, and the NOTIFY sent at its commit, are done.
    const committedAt = Date.now();
    const { at, page } = await waiting;
    expect(page.events.map((event) => event.seq)).toEqual([1]);
    // Within 100 ms of the commit on a (b's own look-again interval is 5 s): only the notification can have answered it.
    expect(at - committedAt).toBeLessThan(100);

    // Requests that share one transaction on a: the group's one notification wakes the reader as well.
    const store = a.server.store as PostgresDedupeStore;
    const groupsBefore = store.groupCommits;
    const waitingAgain = fetch(`${b.url}/v1/events?after=1&wait=20`).then(async (response) => ({ at: Date.now(), page: (await response.json()) as { events: unknown[] } }));
    await new Promise((resolve) => setTimeout(resolve, 300));
    await Promise.all([2, 3, 4].map((run) => store.ingest({ ...STREAM, runId: `group-${run}` }, [checkItem(item(1, newKey()), 0)])));
    const groupCommittedAt = Date.now();
    expect(store.groupCommits - groupsBefore).toBe(1);
    const woken = await waitingAgain;
    expect(woken.page.events.length).toBeGreaterThan(0);
    expect(woken.at - groupCommittedAt).toBeLessThan(100);
  });

  it('accepts on one instance an asset registered through the other, and loads assets at start', async () => {
    const [a, b] = await twoInstances();
    expect((await send(b.url, [item(1, newKey(), { asset: 'late_asset' })])).json.results[0].code).toBe('unknown_asset');
    expect((await fetch(`${a.url}/v1/assets/late_asset`, { method: 'PUT' })).status).toBe(201);
    expect((await send(b.url, [item(2, newKey(), { asset: 'late_asset' })])).json.results[0].status).toBe('accepted');
    // One asset b knows and one it does not yet: b looks again.
    expect((await fetch(`${a.url}/v1/assets/later_asset`, { method: 'PUT' })).status).toBe(201);
    const mixed = await send(b.url, [item(3, newKey()), item(4, newKey(), { asset: 'later_asset' })]);
    expect(mixed.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'accepted']);
    const third = await startServer({ backend: 'postgres', db: PG_URL, schema: (a.server.store as PostgresDedupeStore).schema, assets: [] });
    expect(((await (await fetch(`${third.url}/v1/assets`)).json()) as { assets: string[] }).assets).toEqual(['batch_ready', 'late_asset', 'later_asset']);
    expect((await send(third.url, [item(1, newKey(), { asset: 'late_asset' })], 'r2')).json.results[0].status).toBe('accepted');
  });

  it('lets six readers paging at once on both instances see every event once while writers write', async () => {
    const [a, b] = await twoInstances();
    let writing = true;
    const readers = Array.from({ length: 6 }, async (_, reader) => {
      const seen: string[] = [];
      let after = 0;
      for (let idle = 0, read = 0; writing || idle < 2; read++) {
        const response = await fetch(`${((reader + read) % 2 ? a : b).url}/v1/events?after=${after}&limit=40`);
        expect(response.status).toBe(200);
        const page = (await response.json()) as { events: { key: string }[]; next: number };
        seen.push(...page.events.map((event) => event.key));
        after = page.next;
        idle = page.events.length === 0 && !writing ? idle + 1 : 0;
      }
      return seen;
    });
    await Promise.all(
      Array.from({ length: 6 }, async (_, writer) => {
        for (let request = 0; request < 8; request++) {
          const items = Array.from({ length: 10 }, (_, i) => item(request * 10 + i + 1, newKey()));
          expect((await send((writer % 2 ? a : b).url, items, `writer-${writer}`)).status).toBe(200);
        }
      }),
    );
    writing = false;
    for (const seen of await Promise.all(readers)) {
      expect(seen).toHaveLength(6 * 8 * 10);
      expect(new Set(seen).size).toBe(seen.length);
    }
  });

  it("opens a schema of any name, quoted where it is used, and 'oncebox' when none is given; close ends its pool", async () => {
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    const odd = `odd "name" ${process.pid}`;
    const hadDefault = (await admin.query("SELECT 1 FROM information_schema.schemata WHERE schema_name = 'oncebox'")).rowCount === 1;
    try {
      for (const schema of [odd, undefined]) {
        const store = await PostgresDedupeStore.open({ connectionString: PG_URL, ...(schema === undefined ? {} : { schema }) });
        expect(store.schema).toBe(schema ?? 'oncebox');
        await store.registerAsset('batch_ready');
        // Many at once, so that the pool opens new connections: each must find the schema by itself.
        const lists = await Promise.all(Array.from({ length: 12 }, () => store.listAssets()));
        for (const list of lists) expect(list).toContain('batch_ready');
        const results = await store.ingest({ ...STREAM, runId: randomUUID() }, [checkItem(item(1, randomUUID()), 0)]);
        expect(results[0]).toMatchObject({ status: 'accepted' });
        await store.close();
        await expect(store.listAssets()).rejects.toThrow();
      }
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${odd.replaceAll('"', '""')}" CASCADE`);
      if (!hadDefault) await admin.query('DROP SCHEMA IF EXISTS oncebox CASCADE');
      await admin.end();
    }
  });

  it('refuses a schema whose migrations are newer than this code knows', async () => {
    const schema = testSchema();
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    try {
      await admin.query(`CREATE SCHEMA "${schema}"`);
      await admin.query(`CREATE TABLE "${schema}".oncebox_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      await admin.query(`INSERT INTO "${schema}".oncebox_migrations (version, name) VALUES (99, 'from the future')`);
    } finally {
      await admin.end();
    }
    await expect(PostgresDedupeStore.open({ connectionString: PG_URL, schema })).rejects.toMatchObject({
      code: 'schema_too_new',
      message: expect.stringMatching(new RegExp(`^PostgreSQL schema "${schema}": schema version 99 is newer than this oncebox knows \\(\\d+\\)\\. A newer oncebox migrated it`)),
    });
  });

  it("keeps every record through the upgrade to keys scoped by producer, so an old key's retry is still a duplicate", async () => {
    const { migratePostgres } = await import('../../src/dedupe/postgres/migrate.js');
    const { serverPostgresMigrations } = await import('../../src/dedupe/postgres/migrations.js');
    const schema = testSchema();
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const key = randomUUID();
    const eventId = randomUUID();
    const sent = item(1, key);
    const fingerprint = (checkItem(sent, 0) as { fingerprint: string }).fingerprint;
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations.slice(0, 3));
      await pool.query(`INSERT INTO "${schema}".dedupe (key, fingerprint, event_id, ts, created_at) VALUES ($1, $2, $3, 't0', $4)`, [key, fingerprint, eventId, Date.now()]);
      await pool.query(
        `INSERT INTO "${schema}".events (event_id, key, ts, asset, producer, workflow, run_id, task, attempt, seq) VALUES ($1, $2, 't0', 'batch_ready', $3, 'w', 'old', NULL, 1, 1)`,
        [eventId, key, STREAM.producer],
      );
    } finally {
      await pool.end();
    }
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    try {
      await store.registerAsset('batch_ready');
      const [retry] = await store.ingest({ ...STREAM, runId: 'new' }, [checkItem(sent, 0)]);
      expect(retry).toMatchObject({ status: 'duplicate', eventId, timestamp: 't0' });
    } finally {
      await store.close();
    }
  });

  it('commits the requests that arrive together in one transaction, and a request that fails there undoes only itself', async () => {
    const schema = testSchema();
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    try {
      await store.registerAsset('batch_ready');
      const stream = (runId: string) => ({ producer: 'p', workflow: 'w', runId, task: null, attempt: 1 });
      const events = (count: number) => Array.from({ length: count }, (_, i) => checkItem({ seq: i + 1, key: randomUUID(), kind: 'event', asset: 'batch_ready', partitionKey: `b${i}` }, i));
      const [failing, fine] = [events(3), events(2)];
      // The failing request stores its events, then fails on its stream position: its savepoint goes, the others' writes stay.
      await admin.query(`CREATE FUNCTION "${schema}".fail_position() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$`);
      await admin.query(`CREATE TRIGGER fail_position BEFORE INSERT ON "${schema}".stream_seqs FOR EACH ROW WHEN (NEW.run_id = 'fail-me') EXECUTE FUNCTION "${schema}".fail_position()`);
      const before = store.groupCommits;
      const answers = await Promise.allSettled([store.ingest(stream('fine'), fine), store.ingest(stream('fail-me'), failing), store.ingest(stream('fine-too'), events(1))]);
      expect(store.groupCommits - before).toBe(1);
      expect(answers.map((answer) => answer.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect(String((answers[1] as PromiseRejectedResult).reason)).toContain('injected failure');
      // In the order the requests came, each request's events in its order.
      expect((await store.listEvents({ after: 0, limit: 10 })).events.map((event) => `${event.runId}/${event.seq}`)).toEqual(['fine/1', 'fine/2', 'fine-too/1']);
      await admin.query(`DROP TRIGGER fail_position ON "${schema}".stream_seqs`);
      // Nothing of the failed request was kept: its retry is new, not a duplicate.
      expect((await store.ingest(stream('fail-me'), failing)).map((result) => result.status)).toEqual(['accepted', 'accepted', 'accepted']);
    } finally {
      await admin.end();
      await store.close();
    }
  });

  it('migration 011: numbers the events the sequencer had not yet, above every cursor it gave, and new events above them', async () => {
    const { migratePostgres } = await import('../../src/dedupe/postgres/migrate.js');
    const { serverPostgresMigrations } = await import('../../src/dedupe/postgres/migrations.js');
    const schema = testSchema();
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const keys = Array.from({ length: 5 }, () => randomUUID());
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations.filter((m) => m.version <= 10));
      await pool.query(`INSERT INTO "${schema}".assets VALUES ('batch_ready', 't0')`);
      // Cursors 5 to 7 given; 8 and 9 were given too, to events retention has removed since; two rows wait.
      for (const [i, key] of keys.entries()) {
        await pool.query(
          `INSERT INTO "${schema}".events (event_id, key, ts, asset, producer, workflow, run_id, task, attempt, seq, cursor)
           VALUES ($1, $1, 't0', 'batch_ready', 'p', 'w', 'old', NULL, 1, $2, $3)`,
          [key, i + 1, i < 3 ? i + 5 : null],
        );
      }
      await pool.query(`UPDATE "${schema}".event_cursor SET last = 9`);
    } finally {
      await pool.end();
    }
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    try {
      const [stored] = await store.ingest({ ...STREAM, runId: 'new' }, [checkItem(item(1, newKey()), 0)]);
      expect(stored).toMatchObject({ status: 'accepted' });
      const page = await store.listEvents({ after: 0, limit: 10 });
      expect(page.events.map((e) => [e.cursor, e.runId === 'old' ? e.key : 'new'])).toEqual([
        [5, keys[0]],
        [6, keys[1]],
        [7, keys[2]],
        [10, keys[3]],
        [11, keys[4]],
        [12, 'new'],
      ]);
    } finally {
      await store.close();
    }
  });

  it('migration 012: moves each dedupe record onto its event, keeps the records that outlived theirs, and leaves expired keys released', async () => {
    const { migratePostgres } = await import('../../src/dedupe/postgres/migrate.js');
    const { serverPostgresMigrations } = await import('../../src/dedupe/postgres/migrations.js');
    const schema = testSchema();
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const sent = [1, 2, 3].map((seq) => item(seq, newKey()));
    const fingerprints = sent.map((s) => (checkItem(s, 0) as { fingerprint: string }).fingerprint);
    const ids = sent.map(() => randomUUID());
    const orphan = item(4, newKey());
    const orphanId = randomUUID();
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations.filter((m) => m.version <= 11));
      await pool.query(`INSERT INTO "${schema}".assets VALUES ('batch_ready', 't0')`);
      for (const [i, s] of sent.entries()) {
        await pool.query(
          `INSERT INTO "${schema}".events (event_id, key, ts, asset, partition_key, producer, workflow, run_id, task, attempt, seq)
           VALUES ($1, $2, 't${i}', 'batch_ready', $3, $4, 'w', 'old', NULL, 1, $5)`,
          [ids[i], s.key, s.partitionKey, STREAM.producer, s.seq],
        );
      }
      // Events 1 and 2 have their records (2 absorbed three retries); event 3's record has expired; the
      // fourth record's event was removed by retention inside the window.
      for (const i of [0, 1]) {
        await pool.query(`INSERT INTO "${schema}".dedupe (producer, key, fingerprint, event_id, ts, created_at, duplicates) VALUES ($1, $2, $3, $4, $5, $6, $7)`, [
          STREAM.producer,
          sent[i]!.key,
          fingerprints[i],
          ids[i],
          `t${i}`,
          Date.now(),
          i === 1 ? 3 : 0,
        ]);
      }
      await pool.query(`INSERT INTO "${schema}".dedupe (producer, key, fingerprint, event_id, ts, created_at) VALUES ($1, $2, $3, $4, 't-orphan', $5)`, [
        STREAM.producer,
        orphan.key,
        (checkItem(orphan, 0) as { fingerprint: string }).fingerprint,
        orphanId,
        Date.now(),
      ]);
      await pool.query(`INSERT INTO "${schema}".streams (producer, run_id, task, epoch, updated_at) VALUES ($1, 'old', '', 1, 't0')`, [STREAM.producer]);
      await pool.query(`INSERT INTO "${schema}".stream_seqs (producer, run_id, task, attempt, last_seq) VALUES ($1, 'old', '', 1, 3)`, [STREAM.producer]);
    } finally {
      await pool.end();
    }
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    try {
      expect(await store.streamState(STREAM.producer, 'old', null)).toMatchObject({ epoch: 1, attempts: [{ attempt: 1, lastSeq: 3 }] });
      const retried = await store.ingest({ ...STREAM, runId: 'new' }, [...sent, orphan].map((s, i) => checkItem({ ...s, seq: i + 1 }, 0)));
      expect(retried.map((r) => [r.status, 'eventId' in r ? r.eventId : undefined])).toEqual([
        ['duplicate', ids[0]],
        ['duplicate', ids[1]],
        ['accepted', expect.any(String)],
        ['duplicate', orphanId],
      ]);
      expect(retried[2]).not.toMatchObject({ eventId: ids[2] });
      // The counts moved with the records: event 2's three retries and this one.
      const partitions = await store.catalog.partitions('batch_ready', { limit: 10 });
      const counted = Object.fromEntries(partitions!.items.map((p) => [p.partitionKey, p.duplicates]));
      expect(counted[sent[1]!.partitionKey!]).toBe(4);
      expect(counted[sent[0]!.partitionKey!]).toBe(1);
    } finally {
      await store.close();
    }
  });

  it("migration 013: answers a key stored before keys were filed by run as before, when a newer relay says it is the run's", async () => {
    const { migratePostgres } = await import('../../src/dedupe/postgres/migrate.js');
    const { serverPostgresMigrations } = await import('../../src/dedupe/postgres/migrations.js');
    const schema = testSchema();
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const sent = item(1, newKey(), { partitionKey: 'batch-1' });
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations.filter((m) => m.version <= 12));
      await pool.query(`INSERT INTO "${schema}".assets VALUES ('batch_ready', 't0')`);
      await pool.query(
        `INSERT INTO "${schema}".events (event_id, key, ts, asset, partition_key, producer, workflow, run_id, task, attempt, seq, fingerprint, created_at)
         VALUES ($1, $2, '2026-12-01T00:00:00.000Z', 'batch_ready', 'batch-1', $3, 'w', $4, NULL, 1, 1, $5, $6)`,
        [randomUUID(), sent.key, STREAM.producer, STREAM.runId, (checkItem(sent, 0) as { fingerprint: string }).fingerprint, Date.now()],
      );
    } finally {
      await pool.end();
    }
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    const ofRun = (fields: Record<string, unknown> = {}) => ({ ...(checkItem({ ...sent, ...fields }, 0) as object), keyOfRun: true }) as ReturnType<typeof checkItem>;
    try {
      // The retry after the upgrade says the key is the run's: it is still the stored event, and counted there.
      expect((await store.ingest({ ...STREAM, attempt: 2 }, [ofRun()]))[0]).toMatchObject({ status: 'duplicate', timestamp: '2026-12-01T00:00:00.000Z' });
      expect((await store.ingest({ ...STREAM, attempt: 3 }, [ofRun({ extra: { rows: 1 } })]))[0]).toMatchObject({ status: 'conflict' });
      expect((await store.ingest({ ...STREAM, attempt: 4 }, [checkItem(sent, 0)]))[0]).toMatchObject({ status: 'duplicate' });
      expect((await store.listEvents({ after: 0, limit: 10 })).events).toHaveLength(1);
      const partitions = await store.catalog.partitions('batch_ready', { limit: 10 });
      expect(partitions?.items).toEqual([expect.objectContaining({ partitionKey: 'batch-1', events: 1, duplicates: 2 })]);
    } finally {
      await store.close();
    }
  });

  it('migration 014: keeps each checkpoint, and a later update of one still replaces it', async () => {
    const { migratePostgres } = await import('../../src/dedupe/postgres/migrate.js');
    const { serverPostgresMigrations } = await import('../../src/dedupe/postgres/migrations.js');
    const schema = testSchema();
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations.filter((m) => m.version <= 13));
      await pool.query(`INSERT INTO "${schema}".streams (producer, run_id, task, epoch, updated_at) VALUES ($1, $2, '', 1, 't0')`, [STREAM.producer, STREAM.runId]);
      await pool.query(`INSERT INTO "${schema}".stream_seqs (producer, run_id, task, attempt, last_seq) VALUES ($1, $2, '', 1, 2)`, [STREAM.producer, STREAM.runId]);
      for (const [seq, name] of [[1, 'backlog'], [2, 'offset']] as const) {
        await pool.query(
          `INSERT INTO "${schema}".stream_checkpoints (producer, run_id, task, name, value, attempt, seq, updated_at) VALUES ($1, $2, '', $3, $4, 1, $5, 't0')`,
          [STREAM.producer, STREAM.runId, name, JSON.stringify(seq * 10), seq],
        );
      }
    } finally {
      await pool.end();
    }
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    try {
      const [answer] = await store.ingest(STREAM, [checkItem({ seq: 3, key: newKey(), kind: 'checkpoint', name: 'backlog', value: 30 }, 0)]);
      expect(answer).toMatchObject({ status: 'checkpointed' });
      const state = await store.streamState(STREAM.producer, STREAM.runId, null);
      expect(state?.checkpoints).toEqual({ backlog: 30, offset: 20 });
    } finally {
      await store.close();
    }
  });

  it("files a key said to be the run's by its run and partition, any other per producer; misused with another partition, it makes another event, never another producer's", async () => {
    const schema = testSchema();
    const store = await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const key = newKey();
    const send = async (stream: typeof STREAM, partitionKey: string, keyOfRun: boolean) =>
      (await store.ingest(stream, [{ ...(checkItem(item(1, key, { partitionKey }), 0) as object), ...(keyOfRun ? { keyOfRun: true } : {}) } as ReturnType<typeof checkItem>]))[0];
    try {
      await store.registerAsset('batch_ready');
      const first = await send(STREAM, 'a', true);
      expect(first).toMatchObject({ status: 'accepted' });
      // The same partition, said or not: the same event.
      expect(await send({ ...STREAM, attempt: 2 }, 'a', false)).toEqual({ ...first, status: 'duplicate' });
      // A derived key never comes with another partition; a client that sends one so gets an event per place.
      expect(await send({ ...STREAM, attempt: 3 }, 'b', true)).toMatchObject({ status: 'accepted' });
      expect(await send({ ...STREAM, producer: 'other' }, 'a', true)).toMatchObject({ status: 'accepted' });
      const explicit = newKey();
      await store.ingest({ ...STREAM, runId: 'explicit' }, [checkItem(item(1, explicit), 0)]);
      const { rows } = await pool.query<{ key: string; producer: string; run_slot: string; filed_partition: string }>(
        `SELECT key, producer, run_slot, filed_partition FROM "${schema}".events ORDER BY cursor`,
      );
      // Keys of the run sit together, by run slot and partition; the explicit key per producer.
      expect(rows.map((r) => [r.producer, r.run_slot !== '0', r.filed_partition])).toEqual([
        [STREAM.producer, true, 'a'],
        [STREAM.producer, true, 'b'],
        ['other', true, 'a'],
        [STREAM.producer, false, ''],
      ]);
    } finally {
      await pool.end();
      await store.close();
    }
  });
});
