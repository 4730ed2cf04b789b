import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { EventPage, ItemResult, StreamIdentity, StreamState } from '../../protocol/wire.js';
import { ingestPolicy, ingestSteps, TRUSTED_SCOPE, type IngestPolicy, type IngestScope } from '../ingest/steps.js';
import type { CheckedItem, InvalidItem } from '../item-check.js';
import { type CompactionResult, type DedupeStore, type EventQuery, type RetentionPolicy, type StoreSizes } from '../store.js';
import { deleteInBatches, streamOf, toStoredEvent } from '../tables.js';
import type { LineagePolicy } from '../ingest/lineage.js';
import { decideClaim, type AttemptClaim, type ClaimDecision } from '../attempt-claim.js';
import { EventSignal } from '../event-signal.js';
import { notifiedAssets } from '../stored-assets.js';
import { TokenRegistry } from '../tokens.js';
import { connectFailure, createPool, inTransaction, runStatement } from './connection.js';
import { advisoryKey, migratePostgres } from './migrate.js';
import { serverPostgresMigrations } from './migrations.js';
import { PostgresIngestSteps } from './ingest-steps.js';
import { PostgresIngestGroups } from './ingest-groups.js';
import { Catalog } from '../catalog/catalog.js';
import { CATALOG_READ_TIMEOUT_MS, type CatalogSchema } from '../catalog/database.js';
import { PostgresCatalogDatabase } from '../catalog/postgres-database.js';
import { forgetRemoved, type RemovedEvent } from '../catalog/rollup.js';
import { ingestStatements, type PgSchema } from './statements.js';

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
  /** How deep consumers' chains of emissions may go, and which assets may cycle. @defaultValue depth 16, no cycles */
  lineage?: LineagePolicy;
  /** How long a run may go without a request and no end before the catalog shows it stale. @defaultValue 24 hours */
  staleRunAfterMs?: number | undefined;
}

/** Connections of an instance's pool for the catalog, beside its pool for publishing. */
export const CATALOG_CONNECTIONS = 2;

/**
 * The dedupe store on PostgreSQL, for several stateless server instances over one database.
 *
 * Concurrency: transactions run at READ COMMITTED, and every request first locks its stream's row in
 * `streams` (SELECT … FOR UPDATE). Two instances handling the same stream therefore take turns: the
 * second reads the epoch, the last sequence number and the checkpoint copy only after the first
 * committed, so neither can accept a gap, accept a fenced attempt, or move a checkpoint backwards. Row
 * locks were chosen over SERIALIZABLE because requests of one stream conflict by design (they extend the
 * same sequence): under SERIALIZABLE they would abort and retry each other, while a row lock just
 * queues them. Claiming keys stores events, under an advisory lock held to the commit, so that cursors
 * are given in commit order (PostgresIngestSteps); the requests an instance receives at once share one
 * transaction (PostgresIngestGroups).
 */
export class PostgresDedupeStore implements DedupeStore {
  private readonly db: Kysely<PgSchema>;
  private readonly statements: ReturnType<typeof ingestStatements>;
  private readonly steps: PostgresIngestSteps;
  private readonly groups: PostgresIngestGroups;
  private readonly now: () => Date;
  private assets = new Set<string>();
  readonly tokens: TokenRegistry;

  readonly stored = new EventSignal();
  readonly catalog: Catalog;
  private readonly catalogDb: PostgresCatalogDatabase;
  /** The advisory lock under which events take their cursors and keys are claimed or released (PostgresIngestSteps). */
  private readonly cursorLock: string;
  /** The NOTIFY channel of this schema: one per schema, so that stores in different schemas do not wake each other. */
  private readonly channel: string;
  private listener: pg.Client | undefined;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly catalogPool: pg.Pool,
    readonly schema: string,
    now: (() => Date) | undefined,
    private readonly policy: IngestPolicy,
    staleRunAfterMs: number | undefined,
  ) {
    this.channel = `oncebox_events_${advisoryKey(schema, 'events')}`;
    this.db = new Kysely<PgSchema>({ dialect: new PostgresDialect({ pool }) });
    this.statements = ingestStatements(this.db);
    this.cursorLock = advisoryKey(schema, 'cursors');
    this.steps = new PostgresIngestSteps(this.statements, this.channel, this.cursorLock);
    this.groups = new PostgresIngestGroups(pool, this.statements, this.steps, this.cursorLock, ({ stream, items, scope }) =>
      ingestSteps({ stream, items, now: this.now(), isRegistered: (asset) => this.assets.has(asset), scope, ...this.policy }),
    );
    this.now = now ?? (() => new Date());
    this.tokens = new TokenRegistry(new Kysely({ dialect: new PostgresDialect({ pool }) }), this.now);
    this.catalogDb = new PostgresCatalogDatabase(catalogPool, this.db as unknown as Kysely<CatalogSchema>);
    this.catalog = new Catalog(this.catalogDb, this.now, staleRunAfterMs);
  }

  /** Connects, migrates the schema (safely beside other instances doing the same) and loads the assets. */
  static async open(options: PostgresStoreOptions): Promise<PostgresDedupeStore> {
    const schema = options.schema ?? 'oncebox';
    const searchPath = `-c search_path=${startupOptionValue(`"${schema.replaceAll('"', '""')}"`)}`;
    const pool = createPool({
      connectionString: options.connectionString,
      // Stryker disable next-line LogicalOperator: pg's own default pool size is 10 too
      max: options.poolSize ?? 10,
      options: searchPath,
      // Named in pg_stat_activity, so that an operator tells publishing from the catalog's reads.
      application_name: `oncebox ${schema}`.slice(0, 63),
    });
    // The catalog's reads on connections of their own, few and with a time limit: however many readers
    // loop over the costliest list, they wait for each other, never for a publisher's connection.
    const catalogPool = createPool({
      connectionString: options.connectionString,
      max: CATALOG_CONNECTIONS,
      options: `${searchPath} -c statement_timeout=${CATALOG_READ_TIMEOUT_MS}`,
      application_name: `oncebox catalog ${schema}`.slice(0, 63),
    });
    try {
      await migratePostgres(pool, schema, serverPostgresMigrations);
      const store = new PostgresDedupeStore(pool, catalogPool, schema, options.now, ingestPolicy(options), options.staleRunAfterMs);
      await store.loadAssets();
      await store.listen(options.connectionString);
      return store;
      // Stryker disable next-line BlockStatement: a pool left open leaks connections, which no test observes
    } catch (error) {
      await pool.end();
      await catalogPool.end();
      throw connectFailure(options.connectionString, error);
    }
  }

  private async loadAssets(): Promise<void> {
    const rows = await this.db.selectFrom('assets').select('name').execute();
    this.assets = new Set(rows.map((row) => row.name));
  }

  async ingest(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[], scope: IngestScope = TRUSTED_SCOPE): Promise<ItemResult[]> {
    // Assets registered through another instance since this one loaded them.
    const unknown = items.some((item) => item.kind === 'event' && !this.assets.has(item.payload.asset));
    if (unknown) await this.loadAssets();
    return this.groups.ingest({ stream, items, scope });
  }

  /** @internal Ingest transactions committed so far: requests that shared one count once. */
  get groupCommits(): number {
    return this.groups.commits;
  }

  async listEvents(query: EventQuery): Promise<EventPage> {
    let select = this.db
      .selectFrom('events')
      .selectAll()
      .where('cursor', '>', query.after)
      .orderBy('cursor')
      .limit(query.limit);
    if (query.asset !== undefined) select = select.where('asset', '=', query.asset);
    else if (query.assets !== undefined) select = select.where('asset', 'in', [...query.assets]);
    const events = (await select.execute()).map((row) => toStoredEvent(row));
    return { events, next: events.at(-1)?.cursor ?? query.after };
  }

  async streamState(producer: string, runId: string, task: string | null): Promise<StreamState | undefined> {
    const of = streamOf(producer, runId, task);
    const where = { producer, run_id: runId, task: of.task };
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
    // Built from entries, not by assignment: a checkpoint named __proto__ is an entry like any other.
    const checkpoints: Record<string, unknown> = Object.fromEntries(rows.map((row) => [row.name, JSON.parse(row.value)]));
    return {
      producer,
      runId,
      task,
      epoch: stream.epoch,
      attempts: attempts.map((row) => ({ attempt: row.attempt, lastSeq: Number(row.last_seq) })),
      checkpoints,
    };
  }

  async tasksOfRun(producer: string, runId: string, limit: number): Promise<(string | null)[]> {
    const rows = await this.db.selectFrom('stream_seqs').select('task').distinct().where('producer', '=', producer).where('run_id', '=', runId).orderBy('task').limit(limit).execute();
    return rows.map((row) => (row.task === '' ? null : row.task));
  }

  async claimAttempt(producer: string, runId: string, task: string | null, claim: AttemptClaim, scope: Pick<IngestScope, 'openStream'> = {}): Promise<ClaimDecision> {
    const ts = this.now().toISOString();
    const stream = streamOf(producer, runId, task);
    const run = this.statements;
    return inTransaction(this.pool, async (client) => {
      // The lock every ingest of the stream takes too: the epoch cannot move between the read and the write.
      const [locked] = await runStatement(client, run.openStream, { ...stream, ts });
      if (locked!.fresh) scope.openStream?.();
      const decision = decideClaim(locked!.epoch, claim, this.policy.maxAttemptStep);
      if ('granted' in decision) await runStatement(client, run.raiseEpoch, { ...stream, epoch: decision.granted, ts });
      return decision;
    });
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
    // An event row is its key's record, and the dedupe table holds those that outlived their events;
    // estimated, an event whose key the window has released counts as a record too.
    return { events: estimate('events'), dedupeRecords: estimate('events') + estimate('dedupe') };
  }

  async listAssets(): Promise<string[]> {
    const rows = await this.db.selectFrom('assets').select('name').orderBy('name').execute();
    return rows.map((row) => row.name);
  }

  async compact(policy: RetentionPolicy): Promise<CompactionResult> {
    const now = this.now().getTime();
    const windowStart = now - policy.dedupeRetentionMs;
    // Small batches, each its own short transaction, so that compaction never holds ingestion up.
    const keptRecords = await deleteInBatches(policy.batchSize, async () => {
      const result = await sql`
        DELETE FROM dedupe WHERE ctid IN (
          SELECT ctid FROM dedupe WHERE created_at < ${windowStart}::bigint LIMIT ${policy.batchSize}::integer)`.execute(this.db);
      return Number(result.numAffectedRows ?? 0);
    });
    // An event's key past the window is released: its row stays an event, no longer a dedupe record.
    // Under the cursors' lock, like every claim, so that no claim waits on a row this batch holds.
    const releasedKeys = await deleteInBatches(policy.batchSize, () =>
      inTransaction(this.pool, async (client) => {
        await client.query('SELECT pg_advisory_xact_lock($1)', [this.cursorLock]);
        const { rowCount } = await client.query(
          'UPDATE events SET created_at = NULL WHERE ctid IN (SELECT ctid FROM events WHERE created_at < $1 LIMIT $2::integer)',
          [windowStart, policy.batchSize],
        );
        return rowCount ?? 0;
      }),
    );
    let outcomes = 0;
    for (const table of ['stream_outcomes', 'stream_refusals']) {
      outcomes += await deleteInBatches(policy.batchSize, async () => {
        const result = await sql`
          DELETE FROM ${sql.table(table)} WHERE ctid IN (
            SELECT ctid FROM ${sql.table(table)} WHERE created_at < ${now - policy.dedupeRetentionMs}::bigint LIMIT ${policy.batchSize}::integer)`.execute(this.db);
        return Number(result.numAffectedRows ?? 0);
      });
    }
    let events = 0;
    if (policy.eventRetentionMs !== null) {
      const cutoff = new Date(now - policy.eventRetentionMs).toISOString();
      // Each batch lowers the catalog's counts for what it removed, in its own transaction.
      events = await deleteInBatches(policy.batchSize, () =>
        inTransaction(this.pool, async (client) => {
          await client.query('SELECT pg_advisory_xact_lock($1)', [this.cursorLock]);
          // The record of an event removed inside the window is kept, so that a retry still gets its receipt.
          const { rows } = await client.query<RemovedEvent>(
            `WITH gone AS (
               -- The oldest by cursor, up to the first one still inside retention: a prefix of the log
               -- (sqlite/statements.ts, oldEvents, says why).
               DELETE FROM events WHERE cursor IN (
                 SELECT cursor FROM (SELECT cursor, ts FROM events WHERE cursor IS NOT NULL ORDER BY cursor LIMIT $2::integer) AS head
                 WHERE cursor < coalesce((SELECT min(cursor) FROM (SELECT cursor, ts FROM events WHERE cursor IS NOT NULL ORDER BY cursor LIMIT $2::integer) AS young
                                          WHERE ts >= $1), 9223372036854775807))
               RETURNING producer, key, fingerprint, event_id, ts, created_at, duplicates, asset, partition_key, cursor),
             kept AS (
               INSERT INTO dedupe (producer, key, fingerprint, event_id, ts, created_at, duplicates)
               SELECT producer, key, fingerprint, event_id, ts, created_at, duplicates FROM gone WHERE created_at IS NOT NULL
               ON CONFLICT DO NOTHING)
             SELECT asset, partition_key, cursor FROM gone`,
            [cutoff, policy.batchSize],
          );
          await this.catalogDb.runOn(client, forgetRemoved(this.catalogDb, rows));
          return rows.length;
        }),
      );
    }
    // A stream idle past its retention goes with its sequence numbers and checkpoints, in one statement
    // per batch; a stream an ingest holds now is skipped, and its activity keeps it.
    const idleBefore = new Date(now - policy.streamRetentionMs).toISOString();
    const streams = await deleteInBatches(policy.batchSize, async () => {
      const result = await sql<{ n: number }>`
        WITH idle AS (
          SELECT producer, run_id, task FROM streams WHERE updated_at < ${idleBefore} LIMIT ${policy.batchSize}::integer FOR UPDATE SKIP LOCKED),
        seqs AS (DELETE FROM stream_seqs s USING idle WHERE (s.producer, s.run_id, s.task) = (idle.producer, idle.run_id, idle.task)),
        checkpoints AS (DELETE FROM stream_checkpoints c USING idle WHERE (c.producer, c.run_id, c.task) = (idle.producer, idle.run_id, idle.task)),
        fences AS (DELETE FROM stream_fences f USING idle WHERE (f.producer, f.run_id, f.task) = (idle.producer, idle.run_id, idle.task)),
        gone AS (DELETE FROM streams s USING idle WHERE (s.producer, s.run_id, s.task) = (idle.producer, idle.run_id, idle.task) RETURNING 1)
        SELECT count(*)::int AS n FROM gone`.execute(this.db);
      return result.rows[0]?.n ?? 0;
    });
    return { dedupeRecords: keptRecords + releasedKeys, events, outcomes, streams };
  }

  /**
   * Listens on the schema's channel, on a connection of its own, so that events stored by any instance
   * wake this one's waiting readers. Should the connection drop, readers look again at their poll
   * interval instead: slower, never wrong.
   */
  private async listen(connectionString: string): Promise<void> {
    const listener = new pg.Client({ connectionString });
    listener.on('notification', (message) => this.stored.notify(notifiedAssets(message.payload)));
    listener.on('error', () => {
      this.listener = undefined;
      listener.end().catch(() => undefined);
    });
    await listener.connect();
    await listener.query(`LISTEN ${this.channel}`);
    this.listener = listener;
  }

  async close(): Promise<void> {
    this.stored.close();
    await this.listener?.end().catch(() => undefined);
    this.listener = undefined;
    await this.db.destroy();
    await this.catalogPool.end().catch(() => undefined);
  }
}

/**
 * A value in the `options` startup parameter, where whitespace separates arguments: a space or a
 * backslash in it is escaped with a backslash (PostgreSQL's libpq rules), so any schema name survives.
 */
function startupOptionValue(value: string): string {
  return value.replace(/[\\\s]/g, (char) => `\\${char}`);
}
