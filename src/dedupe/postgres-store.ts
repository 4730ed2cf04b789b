import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { EventPage, ItemResult, StreamIdentity, StreamState } from '../protocol/wire.js';
import { deleteInBatches, toStoredEvent, type EventRow, type SharedTables } from './event-row.js';
import { existingKeyResult, newEventIds, planIngest, refuseAttempt, replayResult, type DedupeRecord, type RecordedOutcome } from './ingest-plan.js';
import type { CheckedEvent, CheckedItem, InvalidItem } from './item-check.js';
import { serverPostgresMigrations } from './migrations/postgres/index.js';
import { inTransaction, nameStatements, pgParam, pgStatement, runStatement } from './pg-statements.js';
import { advisoryKey, migratePostgres } from './postgres-migrate.js';
import { TokenRegistry } from './tokens.js';
import { DEFAULT_MAX_ATTEMPT_STEP, type CompactionResult, type DedupeStore, type EventQuery, type RetentionPolicy, type StoreSizes } from './store.js';

interface PgSchema extends SharedTables {
  /** `id` is the insertion order; `cursor` is given after commit by the sequencer. */
  events: Omit<EventRow, 'cursor'> & { id: number; cursor: number | null };
  event_cursor: { id: number; last: number };
}

export interface PostgresStoreOptions {
  /** postgres://user@host:port/database */
  connectionString: string;
  /** The schema that holds oncebox's tables; created on start. @defaultValue 'oncebox' */
  schema?: string;
  /** Connections in this instance's pool. @defaultValue 10 */
  poolSize?: number;
  /** The clock the store stamps events and dedupe records with; injectable for tests. */
  now?: () => Date;
  /** How far above a stream's epoch a new attempt may be (see refuseAttempt). @defaultValue 1000 */
  maxAttemptStep?: number;
}

// bigint columns come back as strings by default; every one of ours fits a double.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

/**
 * The dedupe store on PostgreSQL, for several stateless server instances over one database.
 *
 * Concurrency: transactions run at READ COMMITTED, and every request first locks its stream's row in
 * `streams` (SELECT … FOR UPDATE). Two instances handling the same stream therefore take turns: the
 * second reads the epoch, the last sequence number and the checkpoint copy only after the first
 * committed, so neither can accept a gap, accept a fenced attempt, or move a checkpoint backwards. Row
 * locks were chosen over SERIALIZABLE because requests of one stream conflict by design (they extend the
 * same sequence): under SERIALIZABLE they would abort and retry each other, while a row lock just
 * queues them, and requests of different streams never wait on each other. Dedupe is insert-first on the
 * primary key (INSERT … ON CONFLICT DO NOTHING): a concurrent insert of the same key by another
 * stream's request waits for that transaction and then sees its row.
 */
export class PostgresDedupeStore implements DedupeStore {
  private readonly db: Kysely<PgSchema>;
  private readonly statements: ReturnType<typeof ingestStatements>;
  private readonly now: () => Date;
  private assets = new Set<string>();
  readonly tokens: TokenRegistry;

  private constructor(
    private readonly pool: pg.Pool,
    readonly schema: string,
    now: (() => Date) | undefined,
    private readonly maxAttemptStep: number,
  ) {
    this.db = new Kysely<PgSchema>({ dialect: new PostgresDialect({ pool }) });
    this.statements = ingestStatements(this.db);
    this.now = now ?? (() => new Date());
    this.tokens = new TokenRegistry(new Kysely({ dialect: new PostgresDialect({ pool }) }), this.now);
  }

  /** Connects, migrates the schema (safely beside other instances doing the same) and loads the assets. */
  static async open(options: PostgresStoreOptions): Promise<PostgresDedupeStore> {
    const schema = options.schema ?? 'oncebox';
    const pool = new pg.Pool({
      connectionString: options.connectionString,
      // Stryker disable next-line LogicalOperator: pg's own default pool size is 10 too
      max: options.poolSize ?? 10,
      options: `-c search_path=${startupOptionValue(`"${schema.replaceAll('"', '""')}"`)}`,
    });
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations);
      const store = new PostgresDedupeStore(pool, schema, options.now, options.maxAttemptStep ?? DEFAULT_MAX_ATTEMPT_STEP);
      await store.loadAssets();
      return store;
      // Stryker disable next-line BlockStatement: a pool left open leaks connections, which no test observes
    } catch (error) {
      await pool.end();
      throw error;
    }
  }

  private async loadAssets(): Promise<void> {
    const rows = await this.db.selectFrom('assets').select('name').execute();
    this.assets = new Set(rows.map((row) => row.name));
  }

  async ingest(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[]): Promise<ItemResult[]> {
    // Assets registered through another instance since this one loaded them.
    const unknown = items.some((item) => item.kind === 'event' && !this.assets.has(item.payload.asset));
    if (unknown) await this.loadAssets();
    return inTransaction(this.pool, (client) => this.ingestInTransaction(client, stream, items));
  }

  private async ingestInTransaction(
    client: pg.PoolClient,
    stream: StreamIdentity,
    items: readonly (CheckedItem | InvalidItem)[],
  ): Promise<ItemResult[]> {
    const run = this.statements;
    const ofStream = [stream.producer, stream.runId, stream.task ?? ''];
    const ofAttempt = [...ofStream, stream.attempt];
    const now = this.now();
    const ts = now.toISOString();
    await runStatement(client, run.ensureStream, [...ofStream, ts]);
    const [{ epoch }] = (await runStatement(client, run.lockStream, ofStream)) as [{ epoch: number }];
    const refusal = refuseAttempt(items, stream.attempt, epoch, this.maxAttemptStep);
    if (refusal) return refusal;

    const [seqRow] = await runStatement(client, run.lastSeq, ofAttempt);
    const lastSeqBefore = seqRow?.last_seq ?? 0;
    const plan = planIngest(items, lastSeqBefore, (asset) => this.assets.has(asset));

    // Reads for the retried positions, in two set-based queries.
    const replays = plan.placements.flatMap((p) => (p.type === 'replay' ? [p] : []));
    const outcomes = new Map<number, RecordedOutcome>();
    const records = new Map<string, DedupeRecord>();
    if (replays.length > 0) {
      const rows = await runStatement(client, run.recordedOutcomes, [...ofAttempt, replays.map((p) => p.seq)]);
      for (const row of rows) outcomes.set(row.seq, row);
      await this.readRecords(client, stream.producer, replays.map((p) => p.key), records);
    }

    // Insert first, for every new event at once; the keys that came back were ours.
    const events = plan.placements.flatMap((p) => (p.type === 'event' ? [p.item] : []));
    const eventIds = newEventIds(events.length);
    const inserted = new Set<string>();
    if (events.length > 0) {
      const rows = await runStatement(client, run.insertDedupe, [events.map((e) => e.key), events.map((e) => e.fingerprint), eventIds, ts, now.getTime(), stream.producer]);
      for (const row of rows) inserted.add(row.key);
      // Stryker disable next-line MethodExpression: reading back the keys just inserted reads what this request wrote
      const taken = events.filter((e) => !inserted.has(e.key)).map((e) => e.key);
      if (taken.length > 0) await this.readRecords(client, stream.producer, taken, records);
    }

    const newEvents: { item: CheckedEvent; eventId: string }[] = [];
    const toRecord: (RecordedOutcome & { seq: number })[] = [];
    const checkpoints = new Map<string, { value: string; seq: number }>();
    let eventIndex = 0;
    const results = plan.placements.map((placement): ItemResult => {
      switch (placement.type) {
        case 'final':
          return placement.result;
        case 'refused': {
          const { result } = placement;
          toRecord.push({ seq: result.seq, key: result.key, status: result.status, code: result.code, detail: result.detail, field: result.field ?? null });
          return result;
        }
        case 'replay':
          return replayResult(placement.item, placement.seq, placement.key, outcomes.get(placement.seq), outcomes.has(placement.seq) ? undefined : records.get(placement.key));
        case 'checkpoint': {
          const { item } = placement;
          checkpoints.set(item.name, { value: item.value, seq: item.seq });
          toRecord.push({ seq: item.seq, key: item.key, status: 'checkpointed', code: '', detail: '', field: null });
          return { status: 'checkpointed', seq: item.seq, key: item.key };
        }
        case 'event': {
          const { item } = placement;
          const eventId = eventIds[eventIndex++]!;
          if (inserted.delete(item.key)) {
            // The first item of this batch with the key; a later one with the same key is a retry of it.
            records.set(item.key, { fingerprint: item.fingerprint, eventId, ts });
            newEvents.push({ item, eventId });
            return { status: 'accepted', seq: item.seq, key: item.key, eventId, timestamp: ts };
          }
          const result = existingKeyResult(item, records.get(item.key)!);
          if (result.status === 'conflict') toRecord.push({ seq: result.seq, key: result.key, status: result.status, code: result.code, detail: result.detail, field: null });
          return result;
        }
      }
    });

    if (newEvents.length > 0) {
      await runStatement(client, run.insertEvents, [
        newEvents.map((e) => e.eventId),
        newEvents.map((e) => e.item.key),
        newEvents.map((e) => e.item.payload.asset),
        newEvents.map((e) => e.item.payload.partitionKey ?? null),
        newEvents.map((e) => e.item.payload.partitionDate ?? null),
        newEvents.map((e) => e.item.payload.extra ?? null),
        newEvents.map((e) => e.item.seq),
        ts,
        stream.producer,
        stream.workflow,
        stream.runId,
        stream.task,
        stream.attempt,
        newEvents.map((e) => (e.item.trace === undefined ? null : JSON.stringify(e.item.trace))),
      ]);
    }
    if (toRecord.length > 0) {
      await runStatement(client, run.recordOutcomes, [
        ...ofAttempt,
        toRecord.map((r) => r.seq),
        toRecord.map((r) => r.key),
        toRecord.map((r) => r.status),
        toRecord.map((r) => r.code),
        toRecord.map((r) => r.detail),
        toRecord.map((r) => r.field),
        now.getTime(),
      ]);
    }
    for (const [name, { value, seq }] of checkpoints) {
      await runStatement(client, run.saveCheckpoint, [...ofAttempt, name, value, seq, ts]);
    }
    if (plan.lastSeq !== lastSeqBefore) {
      await runStatement(client, run.saveLastSeq, [...ofAttempt, plan.lastSeq]);
      if (stream.attempt > epoch) await runStatement(client, run.raiseEpoch, [...ofStream, stream.attempt, ts]);
    }
    return results;
  }

  private async readRecords(client: pg.PoolClient, producer: string, keys: string[], into: Map<string, DedupeRecord>): Promise<void> {
    for (const row of await runStatement(client, this.statements.readRecords, [keys, producer])) {
      into.set(row.key, { fingerprint: row.fingerprint, eventId: row.event_id, ts: row.ts });
    }
  }

  /**
   * Gives committed events their cursors, in insertion order, one sequencer at a time. A row whose
   * transaction has not committed yet is invisible here and gets a cursor later, above every cursor
   * given so far: so a reader paging by cursor never skips an event that committed late.
   */
  private async sequenceEvents(): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await sql`SELECT pg_advisory_xact_lock(${advisoryKey(this.schema, 'sequence')}::bigint)`.execute(trx);
      const { last } = await trx.selectFrom('event_cursor').select('last').where('id', '=', 1).executeTakeFirstOrThrow();
      const result = await sql<{ cursor: number }>`
        UPDATE events SET cursor = ${last}::bigint + numbered.rn
        FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM events WHERE cursor IS NULL) AS numbered
        WHERE events.id = numbered.id
        RETURNING events.cursor`.execute(trx);
      if (result.rows.length > 0) {
        await trx.updateTable('event_cursor').set({ last: sql`last + ${result.rows.length}` }).where('id', '=', 1).execute();
      }
    });
  }

  async listEvents(query: EventQuery): Promise<EventPage> {
    await this.sequenceEvents();
    let select = this.db
      .selectFrom('events')
      .selectAll()
      .where('cursor', 'is not', null)
      .where('cursor', '>', query.after)
      .orderBy('cursor')
      .limit(query.limit);
    if (query.asset !== undefined) select = select.where('asset', '=', query.asset);
    // Only sequenced rows were selected: cursor is not null.
    const events = (await select.execute()).map((row) => toStoredEvent(row as EventRow));
    return { events, next: events.at(-1)?.cursor ?? query.after };
  }

  async streamState(producer: string, runId: string, task: string | null): Promise<StreamState | undefined> {
    const where = { producer, run_id: runId, task: task ?? '' };
    const attempts = await this.db
      .selectFrom('stream_seqs')
      .select(['attempt', 'last_seq'])
      .where((eb) => eb.and(where))
      .orderBy('attempt')
      .execute();
    if (attempts.length === 0) return undefined;
    // Every request inserts its stream's row before it takes a position, so a stream with positions has one.
    const stream = await this.db
      .selectFrom('streams')
      .select('epoch')
      .where((eb) => eb.and(where))
      .executeTakeFirstOrThrow();
    const rows = await this.db
      .selectFrom('stream_checkpoints')
      .select(['name', 'value'])
      .where((eb) => eb.and(where))
      .orderBy('name')
      .execute();
    const checkpoints: Record<string, unknown> = {};
    for (const row of rows) checkpoints[row.name] = JSON.parse(row.value);
    return {
      producer,
      runId,
      task,
      epoch: stream.epoch,
      attempts: attempts.map((row) => ({ attempt: row.attempt, lastSeq: Number(row.last_seq) })),
      checkpoints,
    };
  }

  async registerAsset(name: string): Promise<{ created: boolean }> {
    const result = await this.db
      .insertInto('assets')
      .values({ name, created_at: this.now().toISOString() })
      .onConflict((oc) => oc.column('name').doNothing())
      .executeTakeFirst();
    this.assets.add(name);
    return { created: Number(result.numInsertedOrUpdatedRows ?? 0) === 1 };
  }

  async sizes(): Promise<StoreSizes> {
    // reltuples is -1 before the table was first analysed; it is an estimate, refreshed by autovacuum.
    const { rows } = await this.pool.query<{ relname: string; estimate: number }>(
      `SELECT c.relname, greatest(c.reltuples, 0)::bigint AS estimate FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname IN ('events', 'dedupe')`,
      [this.schema],
    );
    const estimate = (table: string) => Number(rows.find((row) => row.relname === table)?.estimate ?? 0);
    return { events: estimate('events'), dedupeRecords: estimate('dedupe') };
  }

  async listAssets(): Promise<string[]> {
    const rows = await this.db.selectFrom('assets').select('name').orderBy('name').execute();
    return rows.map((row) => row.name);
  }

  async compact(policy: RetentionPolicy): Promise<CompactionResult> {
    const now = this.now().getTime();
    // Small batches, each its own short transaction, so that compaction never holds ingestion up.
    const dedupeRecords = await deleteInBatches(policy.batchSize, async () => {
      const result = await sql`
        DELETE FROM dedupe WHERE ctid IN (
          SELECT ctid FROM dedupe WHERE created_at < ${now - policy.dedupeRetentionMs}::bigint LIMIT ${policy.batchSize}::integer)`.execute(this.db);
      return Number(result.numAffectedRows ?? 0);
    });
    const outcomes = await deleteInBatches(policy.batchSize, async () => {
      const result = await sql`
        DELETE FROM stream_outcomes WHERE ctid IN (
          SELECT ctid FROM stream_outcomes WHERE created_at < ${now - policy.dedupeRetentionMs}::bigint LIMIT ${policy.batchSize}::integer)`.execute(this.db);
      return Number(result.numAffectedRows ?? 0);
    });
    let events = 0;
    if (policy.eventRetentionMs !== null) {
      const cutoff = new Date(now - policy.eventRetentionMs).toISOString();
      events = await deleteInBatches(policy.batchSize, async () => {
        const result = await sql`
          DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ts < ${cutoff} LIMIT ${policy.batchSize}::integer)`.execute(this.db);
        return Number(result.numAffectedRows ?? 0);
      });
    }
    return { dedupeRecords, events, outcomes };
  }

  async close(): Promise<void> {
    await this.db.destroy();
  }
}

/**
 * The statements of the ingest transaction. Parameters: $1 producer, $2 run id, $3 task ('' for none)
 * and, where an attempt is meant, $4 attempt; then each statement's own.
 */
function ingestStatements(db: Kysely<PgSchema>) {
  const ofStream = { producer: pgParam<string>(1, 'text'), run_id: pgParam<string>(2, 'text'), task: pgParam<string>(3, 'text') };
  const ofAttempt = { ...ofStream, attempt: pgParam<number>(4, 'integer') };
  return nameStatements({
    ensureStream: pgStatement(
      db.insertInto('streams').values({ ...ofStream, epoch: sql.lit(0), updated_at: pgParam(4, 'text') }).onConflict((oc) => oc.doNothing()).compile(),
    ),
    lockStream: pgStatement<{ epoch: number }>(
      db.selectFrom('streams').select('epoch').where((eb) => eb.and(ofStream)).forUpdate().compile(),
    ),
    lastSeq: pgStatement<{ last_seq: number }>(
      db.selectFrom('stream_seqs').select('last_seq').where((eb) => eb.and(ofAttempt)).compile(),
    ),
    recordedOutcomes: pgStatement<RecordedOutcome & { seq: number }>(
      db
        .selectFrom('stream_outcomes')
        .select(['seq', 'key', 'status', 'code', 'detail', 'field'])
        .where((eb) => eb.and(ofAttempt))
        .where('seq', '=', sql<number>`ANY(${pgParam(5, 'bigint[]')})`)
        .compile(),
    ),
    // $1 keys, $2 producer.
    readRecords: pgStatement<{ key: string; fingerprint: string; event_id: string; ts: string }>(
      db
        .selectFrom('dedupe')
        .select(['key', 'fingerprint', 'event_id', 'ts'])
        .where('producer', '=', pgParam<string>(2, 'text'))
        .where('key', '=', sql<string>`ANY(${pgParam(1, 'uuid[]')})`)
        .compile(),
    ),
    // $1 keys, $2 fingerprints, $3 event ids, $4 timestamp, $5 created_at (ms), $6 producer.
    insertDedupe: pgStatement<{ key: string }>(
      sql`
        INSERT INTO dedupe (producer, key, fingerprint, event_id, ts, created_at)
        SELECT ${pgParam(6, 'text')}, d.key, d.fingerprint, d.event_id, ${pgParam(4, 'text')}, ${pgParam(5, 'bigint')}
        FROM unnest(${pgParam(1, 'uuid[]')}, ${pgParam(2, 'text[]')}, ${pgParam(3, 'uuid[]')}) AS d(key, fingerprint, event_id)
        ON CONFLICT (producer, key) DO NOTHING
        RETURNING key`.compile(db),
    ),
    // $1..$7 one array per column; $8 timestamp; $9..$13 the stream: producer, workflow, run id, task, attempt;
    // $14 the trace contexts, one per event.
    insertEvents: pgStatement(
      sql`
        INSERT INTO events (event_id, key, asset, partition_key, partition_date, extra, seq, trace_context, ts, producer, workflow, run_id, task, attempt)
        SELECT e.*, ${pgParam(8, 'text')}, ${pgParam(9, 'text')}, ${pgParam(10, 'text')}, ${pgParam(11, 'text')}, ${pgParam(12, 'text')}, ${pgParam(13, 'integer')}
        FROM unnest(${pgParam(1, 'uuid[]')}, ${pgParam(2, 'uuid[]')}, ${pgParam(3, 'text[]')}, ${pgParam(4, 'text[]')},
                    ${pgParam(5, 'text[]')}, ${pgParam(6, 'text[]')}, ${pgParam(7, 'bigint[]')}, ${pgParam(14, 'text[]')}) AS e`.compile(db),
    ),
    // $5..$10 one array per column; $11 created_at (ms).
    recordOutcomes: pgStatement(
      sql`
        INSERT INTO stream_outcomes (producer, run_id, task, attempt, seq, key, status, code, detail, field, created_at)
        SELECT ${pgParam(1, 'text')}, ${pgParam(2, 'text')}, ${pgParam(3, 'text')}, ${pgParam(4, 'integer')}, o.*, ${pgParam(11, 'bigint')}
        FROM unnest(${pgParam(5, 'bigint[]')}, ${pgParam(6, 'text[]')}, ${pgParam(7, 'text[]')}, ${pgParam(8, 'text[]')},
                    ${pgParam(9, 'text[]')}, ${pgParam(10, 'text[]')}) AS o
        ON CONFLICT DO NOTHING`.compile(db),
    ),
    // $5 name, $6 value, $7 seq, $8 timestamp.
    saveCheckpoint: pgStatement(
      db
        .insertInto('stream_checkpoints')
        .values({ ...ofAttempt, name: pgParam(5, 'text'), value: pgParam(6, 'text'), seq: pgParam(7, 'bigint'), updated_at: pgParam(8, 'text') })
        .onConflict((oc) =>
          oc
            .columns(['producer', 'run_id', 'task', 'name'])
            .doUpdateSet({ value: pgParam(6, 'text'), attempt: pgParam(4, 'integer'), seq: pgParam(7, 'bigint'), updated_at: pgParam(8, 'text') }),
        )
        .compile(),
    ),
    // $5 last sequence number.
    saveLastSeq: pgStatement(
      db
        .insertInto('stream_seqs')
        .values({ ...ofAttempt, last_seq: pgParam(5, 'bigint') })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet({ last_seq: pgParam(5, 'bigint') }))
        .compile(),
    ),
    // $4 the new epoch, $5 timestamp.
    raiseEpoch: pgStatement(
      db
        .updateTable('streams')
        .set({ epoch: pgParam(4, 'integer'), updated_at: pgParam(5, 'text') })
        .where((eb) => eb.and(ofStream))
        .compile(),
    ),
  });
}

/**
 * A value in the `options` startup parameter, where whitespace separates arguments: a space or a
 * backslash in it is escaped with a backslash (PostgreSQL's libpq rules), so any schema name survives.
 */
function startupOptionValue(value: string): string {
  return value.replace(/[\\\s]/g, (char) => `\\${char}`);
}
