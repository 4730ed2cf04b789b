import type Database from 'better-sqlite3';
import { sql, type Generated } from 'kysely';
import { OnceboxError } from '../protocol/errors.js';
import type { EventPage, ItemResult, StreamIdentity, StreamState } from '../protocol/wire.js';
import { migrateSqlite } from '../sqlite/migrate.js';
import { openSqlite, type Durability } from '../sqlite/open.js';
import { param, prepare, queryBuilder, type Prepared } from '../sqlite/statements.js';
import type { CheckedItem, InvalidItem } from './item-check.js';
import { deleteInBatches, toStoredEvent, type EventRow, type SharedTables } from './event-row.js';
import { existingKeyResult, newEventIds, planIngest, refuseAttempt, replayResult } from './ingest-plan.js';
import { serverSqliteMigrations } from './migrations/sqlite/index.js';
import { TokenRegistry } from './tokens.js';
import { DEFAULT_MAX_ATTEMPT_STEP, type CompactionResult, type DedupeStore, type EventQuery, type RetentionPolicy, type StoreSizes } from './store.js';

interface ServerSchema extends SharedTables {
  events: Omit<EventRow, 'cursor'> & { cursor: Generated<number> };
}


export interface SqliteStoreOptions {
  path: string;
  durability?: Durability;
  /** The clock the store stamps events and dedupe records with; injectable for tests. */
  now?: () => Date;
  /** How far above a stream's epoch a new attempt may be (see refuseAttempt). @defaultValue 1000 */
  maxAttemptStep?: number;
}

export class ServerSchemaTooNewError extends OnceboxError {
  constructor(path: string, found: number, known: number) {
    super(
      'schema_too_new',
      `${path}: server schema version ${found} is newer than this oncebox knows (${known}); upgrade oncebox.`,
    );
  }
}

/** The embedded dedupe store: one SQLite file, one writer transaction per request. */
export class SqliteDedupeStore implements DedupeStore {
  private readonly db: Database.Database;
  private readonly now: () => Date;
  private readonly maxAttemptStep: number;
  private readonly assets = new Set<string>();
  private readonly statements;
  private readonly ingestTransaction;
  readonly tokens: TokenRegistry;

  constructor(options: SqliteStoreOptions) {
    this.db = openSqlite(options.path, options.durability ?? 'full');
    this.now = options.now ?? (() => new Date());
    this.maxAttemptStep = options.maxAttemptStep ?? DEFAULT_MAX_ATTEMPT_STEP;
    migrateSqlite(this.db, serverSqliteMigrations, (found, known) => new ServerSchemaTooNewError(options.path, found, known));
    const q = queryBuilder<ServerSchema>(this.db);
    this.tokens = new TokenRegistry(queryBuilder(this.db), this.now);
    // One stream (producer, run, task), and one attempt of it, as bound parameters.
    const ofStream = { producer: param('producer'), run_id: param('runId'), task: param('task') };
    const ofAttempt = { ...ofStream, attempt: param('attempt') };
    this.statements = {
      lastSeq: prepare<{ last_seq: number }>(
        this.db,
        q.selectFrom('stream_seqs').select('last_seq').where((eb) => eb.and(ofAttempt)),
      ),
      saveLastSeq: prepare(
        this.db,
        q
          .insertInto('stream_seqs')
          .values({
            producer: param('producer'),
            run_id: param('runId'),
            task: param('task'),
            attempt: param('attempt'),
            last_seq: param('lastSeq'),
          })
          .onConflict((oc) =>
            oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet({ last_seq: param('lastSeq') }),
          ),
      ),
      // Insert first: the unique key decides who is first, with no window between a check and an insert.
      insertDedupe: prepare(
        this.db,
        q
          .insertInto('dedupe')
          .values({
            producer: param('producer'),
            key: param('key'),
            fingerprint: param('fingerprint'),
            event_id: param('eventId'),
            ts: param('ts'),
            created_at: param('createdAt'),
          })
          .onConflict((oc) => oc.columns(['producer', 'key']).doNothing()),
      ),
      findDedupe: prepare<{ fingerprint: string; event_id: string; ts: string }>(
        this.db,
        q.selectFrom('dedupe').select(['fingerprint', 'event_id', 'ts']).where((eb) => eb.and({ producer: param('producer'), key: param('key') })),
      ),
      insertEvent: prepare(
        this.db,
        q.insertInto('events').values({
          event_id: param('eventId'),
          key: param('key'),
          ts: param('ts'),
          asset: param('asset'),
          partition_key: param('partitionKey'),
          partition_date: param('partitionDate'),
          extra: param('extra'),
          producer: param('producer'),
          workflow: param('workflow'),
          run_id: param('runId'),
          task: param('taskOrNull'),
          attempt: param('attempt'),
          seq: param('seq'),
          trace_context: param('traceContext'),
        }),
      ),
      insertOutcome: prepare(
        this.db,
        q
          .insertInto('stream_outcomes')
          .values({
            producer: param('producer'),
            run_id: param('runId'),
            task: param('task'),
            attempt: param('attempt'),
            seq: param('seq'),
            key: param('key'),
            status: param('status'),
            code: param('code'),
            detail: param('detail'),
            field: param('field'),
            created_at: param('createdAt'),
          })
          .onConflict((oc) => oc.doNothing()),
      ),
      findOutcome: prepare<{ key: string; status: string; code: string; detail: string; field: string | null }>(
        this.db,
        q
          .selectFrom('stream_outcomes')
          .select(['key', 'status', 'code', 'detail', 'field'])
          .where((eb) => eb.and({ ...ofAttempt, seq: param('seq') })),
      ),
      eventsAll: prepare<EventRow>(
        this.db,
        q
          .selectFrom('events')
          .selectAll()
          .where('cursor', '>', param('after'))
          .orderBy('cursor')
          .limit(param('limit')),
      ),
      eventsByAsset: prepare<EventRow>(
        this.db,
        q
          .selectFrom('events')
          .selectAll()
          .where('asset', '=', param('asset'))
          .where('cursor', '>', param('after'))
          .orderBy('cursor')
          .limit(param('limit')),
      ),
      insertAsset: prepare(
        this.db,
        q
          .insertInto('assets')
          .values({ name: param('name'), created_at: param('createdAt') })
          .onConflict((oc) => oc.column('name').doNothing()),
      ),
      allAssets: prepare<{ name: string }>(this.db, q.selectFrom('assets').select('name').orderBy('name')),
      compactDedupe: prepare(this.db, {
        compile: () =>
          sql`DELETE FROM dedupe WHERE (producer, key) IN (
                SELECT producer, key FROM dedupe WHERE created_at < ${param('cutoff')} LIMIT ${param('limit')})`.compile(q),
      }),
      // Row values in IN: kysely's builder has no typed form for them, so this one is a raw template.
      compactOutcomes: prepare(this.db, {
        compile: () =>
          sql`DELETE FROM stream_outcomes WHERE (producer, run_id, task, attempt, seq) IN (
                SELECT producer, run_id, task, attempt, seq FROM stream_outcomes WHERE created_at < ${param('cutoff')} LIMIT ${param('limit')})`.compile(q),
      }),
      compactEvents: prepare(
        this.db,
        q
          .deleteFrom('events')
          .where('cursor', 'in', (sub) => sub.selectFrom('events').select('cursor').where('ts', '<', param('cutoff')).limit(param('limit'))),
      ),
      epoch: prepare<{ epoch: number }>(
        this.db,
        q
          .selectFrom('streams')
          .select('epoch')
          .where((eb) => eb.and(ofStream)),
      ),
      saveEpoch: prepare(
        this.db,
        q
          .insertInto('streams')
          .values({ producer: param('producer'), run_id: param('runId'), task: param('task'), epoch: param('attempt'), updated_at: param('ts') })
          .onConflict((oc) => oc.columns(['producer', 'run_id', 'task']).doUpdateSet({ epoch: param('attempt'), updated_at: param('ts') })),
      ),
      saveCheckpoint: prepare(
        this.db,
        q
          .insertInto('stream_checkpoints')
          .values({
            producer: param('producer'),
            run_id: param('runId'),
            task: param('task'),
            name: param('name'),
            value: param('value'),
            attempt: param('attempt'),
            seq: param('seq'),
            updated_at: param('ts'),
          })
          .onConflict((oc) =>
            oc.columns(['producer', 'run_id', 'task', 'name']).doUpdateSet({
              value: param('value'),
              attempt: param('attempt'),
              seq: param('seq'),
              updated_at: param('ts'),
            }),
          ),
      ),
      streamCheckpoints: prepare<{ name: string; value: string }>(
        this.db,
        q
          .selectFrom('stream_checkpoints')
          .select(['name', 'value'])
          .where((eb) => eb.and(ofStream))
          .orderBy('name'),
      ),
      streamAttempts: prepare<{ attempt: number; last_seq: number }>(
        this.db,
        q
          .selectFrom('stream_seqs')
          .select(['attempt', 'last_seq'])
          .where((eb) => eb.and(ofStream))
          .orderBy('attempt'),
      ),
    };
    for (const row of this.statements.allAssets.all()) this.assets.add(row.name);
    this.ingestTransaction = this.db.transaction(
      (stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[]) => this.ingestInTransaction(stream, items),
    );
  }

  async ingest(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[]): Promise<ItemResult[]> {
    return this.ingestTransaction.immediate(stream, items);
  }

  private ingestInTransaction(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[]): ItemResult[] {
    const s = this.statements;
    const streamParams = {
      producer: stream.producer,
      runId: stream.runId,
      // NULL never equals NULL in a key, so a stream without a task is stored under ''.
      task: stream.task ?? '',
      attempt: stream.attempt,
    };
    const now = this.now();
    const ts = now.toISOString();
    const epoch = s.epoch.get(streamParams)?.epoch ?? 0;
    // Checked in the same transaction that a later attempt's first delivery moves the epoch in, so no
    // item of a zombie is accepted once its retry has delivered anything.
    const refusal = refuseAttempt(items, stream.attempt, epoch, this.maxAttemptStep);
    if (refusal) return refusal;
    const lastSeqBefore = s.lastSeq.get(streamParams)?.last_seq ?? 0;
    const plan = planIngest(items, lastSeqBefore, (asset) => this.assets.has(asset));
    // Stryker disable next-line MethodExpression: more ids than events leaves the spare ones unused
    const eventIds = newEventIds(plan.placements.filter((p) => p.type === 'event').length);
    // Stryker disable next-line StringLiteral: a replayed 'checkpointed' outcome is answered from its status alone
    const recordOutcome = (seq: number, key: string, status: string, code = '', detail = '', field: string | null = null) =>
      s.insertOutcome.run({ ...streamParams, seq, key, status, code, detail, field, createdAt: now.getTime() });

    const results = plan.placements.map((placement): ItemResult => {
      switch (placement.type) {
        case 'final':
          return placement.result;
        case 'refused': {
          const { result } = placement;
          recordOutcome(result.seq, result.key, result.status, result.code, result.detail, result.field ?? null);
          return result;
        }
        case 'replay': {
          const { item, seq, key } = placement;
          const outcome = s.findOutcome.get({ ...streamParams, seq });
          const existing = outcome ? undefined : s.findDedupe.get({ producer: stream.producer, key });
          return replayResult(item, seq, key, outcome, existing && { fingerprint: existing.fingerprint, eventId: existing.event_id, ts: existing.ts });
        }
        case 'checkpoint': {
          const { item } = placement;
          s.saveCheckpoint.run({ ...streamParams, name: item.name, value: item.value, seq: item.seq, ts });
          recordOutcome(item.seq, item.key, 'checkpointed');
          return { status: 'checkpointed', seq: item.seq, key: item.key };
        }
        case 'event': {
          const { item } = placement;
          const eventId = eventIds.pop()!;
          // Insert first: the unique key decides who is first, with no window between a check and an insert.
          const inserted = s.insertDedupe.run({ producer: stream.producer, key: item.key, fingerprint: item.fingerprint, eventId, ts, createdAt: now.getTime() });
          if (inserted.changes === 1) {
            s.insertEvent.run({
              ...streamParams,
              workflow: stream.workflow,
              taskOrNull: stream.task,
              seq: item.seq,
              eventId,
              key: item.key,
              ts,
              asset: item.payload.asset,
              partitionKey: item.payload.partitionKey ?? null,
              partitionDate: item.payload.partitionDate ?? null,
              extra: item.payload.extra ?? null,
              traceContext: item.trace === undefined ? null : JSON.stringify(item.trace),
            });
            return { status: 'accepted', seq: item.seq, key: item.key, eventId, timestamp: ts };
          }
          const existing = s.findDedupe.get({ producer: stream.producer, key: item.key })!;
          const result = existingKeyResult(item, { fingerprint: existing.fingerprint, eventId: existing.event_id, ts: existing.ts });
          if (result.status === 'conflict') recordOutcome(result.seq, result.key, result.status, result.code, result.detail);
          return result;
        }
      }
    });
    if (plan.lastSeq !== lastSeqBefore) {
      s.saveLastSeq.run({ ...streamParams, lastSeq: plan.lastSeq });
      if (stream.attempt > epoch) s.saveEpoch.run({ ...streamParams, ts });
    }
    return results;
  }

  async listEvents(query: EventQuery): Promise<EventPage> {
    const rows =
      query.asset === undefined
        ? this.statements.eventsAll.all({ after: query.after, limit: query.limit })
        : this.statements.eventsByAsset.all({ asset: query.asset, after: query.after, limit: query.limit });
    const events = rows.map(toStoredEvent);
    return { events, next: events.at(-1)?.cursor ?? query.after };
  }

  async streamState(producer: string, runId: string, task: string | null): Promise<StreamState | undefined> {
    const params = { producer, runId, task: task ?? '' };
    const attempts = this.statements.streamAttempts.all(params).map((row) => ({ attempt: row.attempt, lastSeq: row.last_seq }));
    if (attempts.length === 0) return undefined;
    const checkpoints: Record<string, unknown> = {};
    for (const row of this.statements.streamCheckpoints.all(params)) checkpoints[row.name] = JSON.parse(row.value);
    // A stream that took positions has its epoch row: the first delivery of an attempt writes both.
    return { producer, runId, task, epoch: this.statements.epoch.get(params)!.epoch, attempts, checkpoints };
  }

  async registerAsset(name: string): Promise<{ created: boolean }> {
    const created = this.statements.insertAsset.run({ name, createdAt: this.now().toISOString() }).changes === 1;
    this.assets.add(name);
    return { created };
  }

  async sizes(): Promise<StoreSizes> {
    const count = (table: string) => (this.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    return { events: count('events'), dedupeRecords: count('dedupe') };
  }

  async listAssets(): Promise<string[]> {
    return this.statements.allAssets.all().map((row) => row.name);
  }

  async compact(policy: RetentionPolicy): Promise<CompactionResult> {
    const now = this.now().getTime();
    const drain = (statement: Prepared<unknown>, cutoff: number | string) =>
      deleteInBatches(policy.batchSize, () => statement.run({ cutoff, limit: policy.batchSize }).changes);
    const dedupeRecords = await drain(this.statements.compactDedupe, now - policy.dedupeRetentionMs);
    const outcomes = await drain(this.statements.compactOutcomes, now - policy.dedupeRetentionMs);
    const events =
      policy.eventRetentionMs === null ? 0 : await drain(this.statements.compactEvents, new Date(now - policy.eventRetentionMs).toISOString());
    return { dedupeRecords, events, outcomes };
  }

  async close(): Promise<void> {
    this.db.close(); // closing twice is harmless
  }
}
