import { Kysely, PostgresDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import type { EventPage, ItemResult, StreamIdentity, StreamState } from '../protocol/wire.js';
import { deleteInBatches, toStoredEvent, type EventRow, type SharedTables } from './event-row.js';
import { existingKeyResult, fencedResults, newEventIds, planIngest, replayResult, type DedupeRecord, type RecordedOutcome } from './ingest-plan.js';
import type { CheckedItem, InvalidItem } from './item-check.js';
import { serverPostgresMigrations } from './migrations/postgres/index.js';
import { advisoryKey, migratePostgres } from './postgres-migrate.js';
import type { CompactionResult, DedupeStore, EventQuery, RetentionPolicy } from './store.js';

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
  private readonly now: () => Date;
  private assets = new Set<string>();

  private constructor(
    private readonly pool: pg.Pool,
    readonly schema: string,
    now: (() => Date) | undefined,
  ) {
    this.db = new Kysely<PgSchema>({ dialect: new PostgresDialect({ pool }) });
    this.now = now ?? (() => new Date());
  }

  /** Connects, migrates the schema (safely beside other instances doing the same) and loads the assets. */
  static async open(options: PostgresStoreOptions): Promise<PostgresDedupeStore> {
    const schema = options.schema ?? 'oncebox';
    const pool = new pg.Pool({
      connectionString: options.connectionString,
      max: options.poolSize ?? 10,
      options: `-c search_path="${schema.replaceAll('"', '""')}"`,
    });
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations);
      const store = new PostgresDedupeStore(pool, schema, options.now);
      await store.loadAssets();
      return store;
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
    const unknown = items.some((item) => item.valid && item.kind === 'event' && !this.assets.has(item.payload.asset));
    if (unknown) await this.loadAssets();
    return this.db.transaction().execute((trx) => this.ingestInTransaction(trx, stream, items));
  }

  private async ingestInTransaction(
    trx: Transaction<PgSchema>,
    stream: StreamIdentity,
    items: readonly (CheckedItem | InvalidItem)[],
  ): Promise<ItemResult[]> {
    const key = { producer: stream.producer, run_id: stream.runId, task: stream.task ?? '' };
    const now = this.now();
    const ts = now.toISOString();
    await trx.insertInto('streams').values({ ...key, epoch: 0, updated_at: ts }).onConflict((oc) => oc.doNothing()).execute();
    const { epoch } = await trx
      .selectFrom('streams')
      .select('epoch')
      .where((eb) => eb.and(key))
      .forUpdate()
      .executeTakeFirstOrThrow();
    if (stream.attempt < epoch) return fencedResults(items, stream.attempt, epoch);

    const streamAttempt = { ...key, attempt: stream.attempt };
    const seqRow = await trx
      .selectFrom('stream_seqs')
      .select('last_seq')
      .where((eb) => eb.and(streamAttempt))
      .executeTakeFirst();
    const lastSeqBefore = Number(seqRow?.last_seq ?? 0);
    const plan = planIngest(items, lastSeqBefore, (asset) => this.assets.has(asset));

    // Reads for the retried positions, in two set-based queries.
    const replays = plan.placements.flatMap((p) => (p.type === 'replay' ? [p] : []));
    const outcomes = new Map<number, RecordedOutcome>();
    const records = new Map<string, DedupeRecord>();
    if (replays.length > 0) {
      const rows = await trx
        .selectFrom('stream_outcomes')
        .select(['seq', 'key', 'status', 'code', 'detail', 'field'])
        .where((eb) => eb.and(streamAttempt))
        .where('seq', 'in', replays.map((p) => p.seq))
        .execute();
      for (const row of rows) outcomes.set(Number(row.seq), row);
      await this.readRecords(trx, replays.map((p) => p.key), records);
    }

    // Insert first, for every new event at once; the keys that came back were ours.
    const events = plan.placements.flatMap((p) => (p.type === 'event' ? [p.item] : []));
    const eventIds = newEventIds(events.length);
    const inserted = new Set<string>();
    if (events.length > 0) {
      const result = await sql<{ key: string }>`
        INSERT INTO dedupe (key, fingerprint, event_id, ts, created_at)
        SELECT * FROM unnest(${events.map((e) => e.key)}::text[], ${events.map((e) => e.fingerprint)}::text[],
                             ${eventIds}::text[], ${events.map(() => ts)}::text[], ${events.map(() => now.getTime())}::bigint[])
        ON CONFLICT (key) DO NOTHING
        RETURNING key`.execute(trx);
      for (const row of result.rows) inserted.add(row.key);
      const taken = events.filter((e) => !inserted.has(e.key)).map((e) => e.key);
      if (taken.length > 0) await this.readRecords(trx, taken, records);
    }

    const newEvents: { index: number; eventId: string }[] = [];
    const toRecord: { seq: number; key: string; status: string; code: string; detail: string; field: string | null }[] = [];
    const checkpoints = new Map<string, { value: string; seq: number }>();
    let eventIndex = 0;
    const results = plan.placements.map((placement): ItemResult => {
      switch (placement.type) {
        case 'final': {
          const { result } = placement;
          if (placement.record && result.status === 'rejected') {
            toRecord.push({ seq: result.seq!, key: result.key!, status: result.status, code: result.code, detail: result.detail, field: result.field ?? null });
          }
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
          const index = eventIndex++;
          const eventId = eventIds[index]!;
          if (inserted.delete(item.key)) {
            // The first item of this batch with the key; a later one with the same key is a retry of it.
            records.set(item.key, { fingerprint: item.fingerprint, eventId, ts });
            newEvents.push({ index, eventId });
            return { status: 'accepted', seq: item.seq, key: item.key, eventId, timestamp: ts };
          }
          const result = existingKeyResult(item, records.get(item.key)!);
          if (result.status === 'conflict') toRecord.push({ seq: result.seq, key: result.key, status: result.status, code: result.code, detail: result.detail, field: null });
          return result;
        }
      }
    });

    if (newEvents.length > 0) {
      const rows = newEvents.map(({ index, eventId }) => ({ item: events[index]!, eventId }));
      await sql`
        INSERT INTO events (event_id, key, ts, asset, partition_key, partition_date, extra, seq, producer, workflow, run_id, task, attempt)
        SELECT e.*, ${stream.producer}::text, ${stream.workflow}::text, ${stream.runId}::text, ${stream.task}::text, ${stream.attempt}::integer
        FROM unnest(${rows.map((r) => r.eventId)}::text[], ${rows.map((r) => r.item.key)}::text[], ${rows.map(() => ts)}::text[],
                    ${rows.map((r) => r.item.payload.asset)}::text[], ${rows.map((r) => r.item.payload.partitionKey ?? null)}::text[],
                    ${rows.map((r) => r.item.payload.partitionDate ?? null)}::text[], ${rows.map((r) => r.item.payload.extra ?? null)}::text[],
                    ${rows.map((r) => r.item.seq)}::bigint[]) AS e`.execute(trx);
    }
    if (toRecord.length > 0) {
      await trx
        .insertInto('stream_outcomes')
        .values(toRecord.map((r) => ({ ...streamAttempt, ...r, created_at: now.getTime() })))
        .onConflict((oc) => oc.doNothing())
        .execute();
    }
    for (const [name, { value, seq }] of checkpoints) {
      await trx
        .insertInto('stream_checkpoints')
        .values({ ...streamAttempt, name, value, seq, updated_at: ts })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task', 'name']).doUpdateSet({ value, attempt: stream.attempt, seq, updated_at: ts }))
        .execute();
    }
    if (plan.lastSeq !== lastSeqBefore) {
      await trx
        .insertInto('stream_seqs')
        .values({ ...streamAttempt, last_seq: plan.lastSeq })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet({ last_seq: plan.lastSeq }))
        .execute();
      if (stream.attempt > epoch) {
        await trx
          .updateTable('streams')
          .set({ epoch: stream.attempt, updated_at: ts })
          .where((eb) => eb.and(key))
          .execute();
      }
    }
    return results;
  }

  private async readRecords(trx: Transaction<PgSchema>, keys: string[], into: Map<string, DedupeRecord>): Promise<void> {
    const rows = await trx.selectFrom('dedupe').select(['key', 'fingerprint', 'event_id', 'ts']).where('key', 'in', keys).execute();
    for (const row of rows) into.set(row.key, { fingerprint: row.fingerprint, eventId: row.event_id, ts: row.ts });
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
    const stream = await this.db
      .selectFrom('streams')
      .select('epoch')
      .where((eb) => eb.and(where))
      .executeTakeFirst();
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
      epoch: stream?.epoch ?? 0,
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

  async listAssets(): Promise<string[]> {
    const rows = await this.db.selectFrom('assets').select('name').orderBy('name').execute();
    return rows.map((row) => row.name);
  }

  async compact(policy: RetentionPolicy): Promise<CompactionResult> {
    const now = this.now().getTime();
    // Small batches, each its own short transaction, so that compaction never holds ingestion up.
    const dedupeRecords = await deleteInBatches(policy.batchSize, async () => {
      const result = await sql`
        DELETE FROM dedupe WHERE key IN (
          SELECT key FROM dedupe WHERE created_at < ${now - policy.dedupeRetentionMs}::bigint LIMIT ${policy.batchSize}::integer)`.execute(this.db);
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
