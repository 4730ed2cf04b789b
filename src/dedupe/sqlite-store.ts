import type Database from 'better-sqlite3';
import { v7 as uuidv7 } from 'uuid';
import type { Generated } from 'kysely';
import { OnceboxError, RejectionCode } from '../protocol/errors.js';
import type { EventPage, ItemResult, StoredEvent, StreamIdentity, StreamState } from '../protocol/wire.js';
import { migrateSqlite } from '../sqlite/migrate.js';
import { openSqlite, type Durability } from '../sqlite/open.js';
import { param, prepare, queryBuilder } from '../sqlite/statements.js';
import type { CheckedItem, InvalidItem } from './item-check.js';
import { serverSqliteMigrations } from './migrations/sqlite/index.js';
import type { DedupeStore, EventQuery } from './store.js';

interface ServerSchema {
  assets: { name: string; created_at: string };
  dedupe: { key: string; fingerprint: string; event_id: string; ts: string; created_at: number };
  events: {
    cursor: Generated<number>;
    event_id: string;
    key: string;
    ts: string;
    asset: string;
    partition_key: string | null;
    partition_date: string | null;
    extra: string | null;
    producer: string;
    workflow: string;
    run_id: string;
    task: string | null;
    attempt: number;
    seq: number;
  };
  stream_seqs: { producer: string; run_id: string; task: string; attempt: number; last_seq: number };
  streams: { producer: string; run_id: string; task: string; epoch: number; updated_at: string };
  stream_checkpoints: {
    producer: string;
    run_id: string;
    task: string;
    name: string;
    value: string;
    attempt: number;
    seq: number;
    updated_at: string;
  };
  stream_outcomes: {
    producer: string;
    run_id: string;
    task: string;
    attempt: number;
    seq: number;
    key: string;
    status: string;
    code: string;
    detail: string;
    field: string | null;
  };
}

interface EventRow {
  cursor: number;
  event_id: string;
  key: string;
  ts: string;
  asset: string;
  partition_key: string | null;
  partition_date: string | null;
  extra: string | null;
  producer: string;
  workflow: string;
  run_id: string;
  task: string | null;
  attempt: number;
  seq: number;
}

export interface SqliteStoreOptions {
  path: string;
  durability?: Durability;
  /** The clock the store stamps events and dedupe records with; injectable for tests. */
  now?: () => Date;
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
  private readonly assets = new Set<string>();
  private readonly statements;
  private readonly ingestTransaction;

  constructor(options: SqliteStoreOptions) {
    this.db = openSqlite(options.path, options.durability ?? 'full');
    this.now = options.now ?? (() => new Date());
    migrateSqlite(this.db, serverSqliteMigrations, (found, known) => new ServerSchemaTooNewError(options.path, found, known));
    const q = queryBuilder<ServerSchema>(this.db);
    const streamKey = (query: any) =>
      query
        .where('producer', '=', param('producer'))
        .where('run_id', '=', param('runId'))
        .where('task', '=', param('task'))
        .where('attempt', '=', param('attempt'));
    this.statements = {
      lastSeq: prepare<{ last_seq: number }>(this.db, streamKey(q.selectFrom('stream_seqs').select('last_seq'))),
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
            key: param('key'),
            fingerprint: param('fingerprint'),
            event_id: param('eventId'),
            ts: param('ts'),
            created_at: param('createdAt'),
          })
          .onConflict((oc) => oc.column('key').doNothing()),
      ),
      findDedupe: prepare<{ fingerprint: string; event_id: string; ts: string }>(
        this.db,
        q.selectFrom('dedupe').select(['fingerprint', 'event_id', 'ts']).where('key', '=', param('key')),
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
          })
          .onConflict((oc) => oc.doNothing()),
      ),
      findOutcome: prepare<{ key: string; status: string; code: string; detail: string; field: string | null }>(
        this.db,
        streamKey(
          q.selectFrom('stream_outcomes').select(['key', 'status', 'code', 'detail', 'field']),
        ).where('seq', '=', param('seq')),
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
      epoch: prepare<{ epoch: number }>(
        this.db,
        q
          .selectFrom('streams')
          .select('epoch')
          .where('producer', '=', param('producer'))
          .where('run_id', '=', param('runId'))
          .where('task', '=', param('task')),
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
          .where('producer', '=', param('producer'))
          .where('run_id', '=', param('runId'))
          .where('task', '=', param('task'))
          .orderBy('name'),
      ),
      streamAttempts: prepare<{ attempt: number; last_seq: number }>(
        this.db,
        q
          .selectFrom('stream_seqs')
          .select(['attempt', 'last_seq'])
          .where('producer', '=', param('producer'))
          .where('run_id', '=', param('runId'))
          .where('task', '=', param('task'))
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
    if (stream.attempt < epoch) {
      // Checked in the same transaction that a later attempt's first delivery moves the epoch in, so no
      // item of a zombie is accepted once its retry has delivered anything.
      const detail = `fenced by attempt ${epoch}: attempt ${stream.attempt} of this run may deliver nothing more`;
      return items.map((item) => ({ status: 'fenced', seq: item.seq, key: item.key, code: 'fenced', epoch, detail }));
    }
    let lastSeq = s.lastSeq.get(streamParams)?.last_seq ?? 0;
    const startSeq = lastSeq;
    const results: ItemResult[] = [];
    const recordOutcome = (result: Extract<ItemResult, { status: 'rejected' | 'conflict' }>) => {
      s.insertOutcome.run({
        ...streamParams,
        seq: result.seq,
        key: result.key,
        status: result.status,
        code: result.code,
        detail: result.detail,
        field: 'field' in result ? (result.field ?? null) : null,
      });
    };

    for (const item of items) {
      const { seq, key } = item;
      if (seq === null || key === null) {
        // Without a readable seq the item cannot take a place in the stream; the items after it will gap.
        const unplaced = item as InvalidItem;
        results.push({ status: 'rejected', seq: null, key: null, code: RejectionCode.InvalidItem, detail: unplaced.detail, field: unplaced.field });
        continue;
      }
      if (seq <= lastSeq) {
        results.push(this.replay(streamParams, item, seq, key));
        continue;
      }
      if (seq > lastSeq + 1) {
        results.push({ status: 'gap', seq, key, expectedSeq: lastSeq + 1 });
        continue;
      }
      lastSeq = seq;
      if (!item.valid) {
        const result = {
          status: 'rejected' as const,
          seq: item.seq,
          key: item.key,
          code: RejectionCode.InvalidItem,
          detail: item.detail,
          field: item.field,
        };
        recordOutcome(result);
        results.push(result);
        continue;
      }
      if (item.kind === 'checkpoint') {
        s.saveCheckpoint.run({ ...streamParams, name: item.name, value: item.value, seq, ts });
        s.insertOutcome.run({ ...streamParams, seq, key, status: 'checkpointed', code: '', detail: '', field: null });
        results.push({ status: 'checkpointed', seq, key });
        continue;
      }
      if (!this.assets.has(item.payload.asset)) {
        const result = {
          status: 'rejected' as const,
          seq: item.seq,
          key: item.key,
          code: RejectionCode.UnknownAsset,
          detail: `asset: "${item.payload.asset}" is not registered on this server; register it (oncebox server --assets FILE, or PUT /v1/assets/${item.payload.asset}) and re-emit`,
          field: 'asset',
        };
        recordOutcome(result);
        results.push(result);
        continue;
      }
      const eventId = uuidv7();
      const inserted = s.insertDedupe.run({
        key: item.key,
        fingerprint: item.fingerprint,
        eventId,
        ts,
        createdAt: now.getTime(),
      });
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
        });
        results.push({ status: 'accepted', seq: item.seq, key: item.key, eventId, timestamp: ts });
        continue;
      }
      const existing = s.findDedupe.get({ key: item.key })!;
      if (existing.fingerprint === item.fingerprint) {
        results.push({ status: 'duplicate', seq: item.seq, key: item.key, eventId: existing.event_id, timestamp: existing.ts });
      } else {
        const result = {
          status: 'conflict' as const,
          seq: item.seq,
          key: item.key,
          code: RejectionCode.KeyConflict,
          detail: `key ${item.key} was stored before with a different payload (event ${existing.event_id}); a re-run must emit the same asset, partition and extra for the same key, or use a new key`,
        };
        recordOutcome(result);
        results.push(result);
      }
    }
    if (lastSeq !== startSeq) {
      s.saveLastSeq.run({ ...streamParams, lastSeq });
      if (stream.attempt > epoch) s.saveEpoch.run({ ...streamParams, ts });
    }
    return results;
  }

  /** A retry of an item the stream already took: answer exactly as the first time. */
  private replay(
    streamParams: { producer: string; runId: string; task: string; attempt: number },
    item: CheckedItem | InvalidItem,
    seq: number,
    key: string,
  ): ItemResult {
    const outcome = this.statements.findOutcome.get({ ...streamParams, seq });
    if (outcome && outcome.key === key) {
      if (outcome.status === 'checkpointed') return { status: 'checkpointed', seq, key };
      return outcome.status === 'conflict'
        ? { status: 'conflict', seq, key, code: RejectionCode.KeyConflict, detail: outcome.detail }
        : {
            status: 'rejected',
            seq,
            key,
            code: outcome.code as RejectionCode,
            detail: outcome.detail,
            ...(outcome.field === null ? {} : { field: outcome.field }),
          };
    }
    const existing = outcome ? undefined : this.statements.findDedupe.get({ key });
    if (existing && item.valid && item.kind === 'event' && existing.fingerprint === item.fingerprint) {
      return { status: 'duplicate', seq, key, eventId: existing.event_id, timestamp: existing.ts };
    }
    return {
      status: 'rejected',
      seq,
      key,
      code: RejectionCode.SequenceReused,
      detail: `seq ${seq} of this stream was already taken by another item; a stream's sequence numbers must not be reused`,
      field: 'seq',
    };
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
    return { producer, runId, task, epoch: this.statements.epoch.get(params)?.epoch ?? 0, attempts, checkpoints };
  }

  async registerAsset(name: string): Promise<{ created: boolean }> {
    const created = this.statements.insertAsset.run({ name, createdAt: this.now().toISOString() }).changes === 1;
    this.assets.add(name);
    return { created };
  }

  async listAssets(): Promise<string[]> {
    return this.statements.allAssets.all().map((row) => row.name);
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

function toStoredEvent(row: EventRow): StoredEvent {
  return {
    cursor: row.cursor,
    eventId: row.event_id,
    timestamp: row.ts,
    key: row.key,
    asset: row.asset,
    partitionKey: row.partition_key,
    partitionDate: row.partition_date,
    extra: row.extra === null ? null : JSON.parse(row.extra),
    producer: row.producer,
    workflow: row.workflow,
    runId: row.run_id,
    task: row.task,
    attempt: row.attempt,
    seq: row.seq,
  };
}
