import { existsSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import { sql, type Generated } from 'kysely';
import { OutboxFileError, SchemaTooNewError, WrongOutboxFileError } from '../protocol/errors.js';
import { migrateSqlite } from '../sqlite/migrate.js';
import { openSqlite, type Durability } from '../sqlite/open.js';
import { param, prepare, queryBuilder } from '../sqlite/statements.js';
import { outboxMigrations } from './migrations.js';
import { RunAttempts } from './run-attempts.js';

/** @internal The outbox file's tables, as kysely sees them. */
export interface OutboxSchema {
  meta: { name: string; value: string };
  outbox: {
    id: Generated<number>;
    key: string;
    fingerprint: string;
    workflow: string;
    run_id: string;
    task: string;
    attempt: number;
    seq: number;
    kind: string;
    asset: string;
    partition_key: string | null;
    partition_date: string | null;
    extra: string | null;
    committed_at: number;
    state: Generated<RowState>;
    event_id: string | null;
    event_ts: string | null;
    duplicate: number | null;
    settled_at: number | null;
    dead_code: string | null;
    dead_reason: string | null;
    checkpoint_name: string | null;
    checkpoint_value: string | null;
    trace_context: string | null;
  };
  checkpoints: { name: string; value: string; updated_at: number };
  lease: { id: number; owner: string; pid: number; host: string; expires_at: number };
  runs: { run_id: string; task: string; opened_by: number; fenced_by: Generated<number> };
  dead_letter_actions: {
    id: Generated<number>;
    row_key: string;
    action: 'retried' | 'discarded';
    at: number;
    dead_code: string | null;
    dead_reason: string | null;
    note: string;
    row: string;
  };
}

export type RowState = 'pending' | 'delivered' | 'dead';

/** @internal An outbox row as the relay reads it. */
export interface OutboxRow {
  id: number;
  key: string;
  fingerprint: string;
  workflow: string;
  run_id: string;
  task: string;
  attempt: number;
  seq: number;
  kind: string;
  asset: string;
  partition_key: string | null;
  partition_date: string | null;
  extra: string | null;
  committed_at: number;
  state: RowState;
  event_id: string | null;
  event_ts: string | null;
  duplicate: number | null;
  dead_code: string | null;
  dead_reason: string | null;
  checkpoint_name: string | null;
  checkpoint_value: string | null;
  /** The W3C trace context the emission was committed in, as JSON; null without OpenTelemetry. */
  trace_context: string | null;
}

/**
 * A tool pointed at the server's database, or at another SQLite file, says so, instead of reporting a
 * schema "newer than this oncebox" or migrating a stranger's file into an outbox.
 */
function refuseOtherDatabases(db: Database.Database): void {
  const tables = new Set((db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((row) => row.name));
  if (tables.has('outbox')) return;
  db.close();
  const what =
    tables.size === 0
      ? 'empty: no job has opened it as an outbox'
      : tables.has('dedupe') && tables.has('events')
        ? "an oncebox server database, not a producer's outbox file"
        : 'a SQLite database, but not an oncebox outbox file';
  throw Object.assign(new Error(`it is ${what}`), { code: 'NOT_AN_OUTBOX' });
}

/**
 * One open outbox file: the connection, its schema and every statement the producer and the relay
 * run, prepared once. Both the job (`openOutbox`) and a relay process (`oncebox relay`) open it this way.
 * @internal
 */
export class OutboxFile {
  readonly db: Database.Database;
  readonly statements: OutboxStatements;
  /** The attempts of each run that opened this file or were fenced, and the rule that older ones may not commit. */
  readonly runs: RunAttempts;

  /**
   * @param create whether a missing file (and its folder) is created: a job's outbox is; a file that the
   *   relay or a tool is pointed at must exist, or a misspelt path would quietly become an empty outbox.
   */
  constructor(
    readonly path: string,
    readonly durability: Durability,
    create = true,
  ) {
    try {
      if (create) mkdirSync(dirname(path), { recursive: true });
      else if (!existsSync(path)) throw Object.assign(new Error('no such file; check the path (it is never created here)'), { code: 'ENOENT' });
      this.db = openSqlite(path, durability);
      if (!create) refuseOtherDatabases(this.db);
    } catch (error) {
      throw new OutboxFileError(path, error);
    }
    try {
      migrateSqlite(this.db, outboxMigrations, (found, known) => new SchemaTooNewError(path, found, known));
      this.statements = prepareStatements(this.db);
    } catch (error) {
      this.db.close();
      throw error instanceof SchemaTooNewError ? error : new OutboxFileError(path, error);
    }
    this.runs = new RunAttempts(this);
  }

  /** Rows (emissions and checkpoint updates) waiting to be delivered. */
  pendingCount(): number {
    return this.statements.countPending.get()?.count ?? 0;
  }

  /** Emissions parked as dead. */
  deadCount(): number {
    return this.statements.countDead.get()?.count ?? 0;
  }

  /**
   * Runs `write` without waiting for fsync, then restores the file's durability. Only for writes that
   * can be lost without harm: a receipt lost on power loss is fetched again, since the relay resends
   * the row with its key and the server answers with the original receipt. (SQLite sets synchronous
   * per connection; the next FULL commit makes these frames durable too.)
   */
  withoutFsync<T>(write: () => T): T {
    if (this.durability !== 'full') return write();
    this.db.pragma('synchronous = NORMAL');
    try {
      return write();
    } finally {
      this.db.pragma('synchronous = FULL');
    }
  }

  getMeta(name: string): string | undefined {
    return this.statements.getMeta.get({ name })?.value;
  }

  setMeta(name: string, value: string): void {
    this.statements.setMeta.run({ name, value });
  }

  /**
   * Binds a new file to its producer, and refuses to open one that belongs to another: two producers
   * sharing a file would share stream positions and keys.
   */
  bindProducer(producer: string): void {
    this.db
      .transaction(() => {
        const owner = this.getMeta('producer');
        if (owner === undefined) this.setMeta('producer', producer);
        else if (owner !== producer) {
          throw new WrongOutboxFileError(
            `${this.path}: this outbox belongs to producer "${owner}", not "${producer}"; give each producer its own file`,
          );
        }
      })
      .immediate();
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}

function prepareStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const ofRun = { run_id: param('runId'), task: param('task') };
  // A row is marked only while it is still where the relay sent it from: a newer attempt that took it
  // over (renumbered it) in the meantime delivers it again as its own.
  const sentRow = { id: param('id'), attempt: param('attempt'), seq: param('seq') };
  return {
    getMeta: prepare<{ value: string }>(db, q.selectFrom('meta').select('value').where('name', '=', param('name'))),
    setMeta: prepare(
      db,
      q
        .insertInto('meta')
        .values({ name: param('name'), value: param('value') })
        .onConflict((oc) => oc.column('name').doUpdateSet({ value: param('value') })),
    ),
    insertRow: prepare(
      db,
      q
        .insertInto('outbox')
        .values({
          key: param('key'),
          fingerprint: param('fingerprint'),
          workflow: param('workflow'),
          run_id: param('runId'),
          task: param('task'),
          attempt: param('attempt'),
          seq: param('seq'),
          kind: param('kind'),
          asset: param('asset'),
          partition_key: param('partitionKey'),
          partition_date: param('partitionDate'),
          extra: param('extra'),
          committed_at: param('committedAt'),
          checkpoint_name: param('checkpointName'),
          checkpoint_value: param('checkpointValue'),
          trace_context: param('traceContext'),
        })
        // Insert first: a key already in the file is caught by the unique index, not by a prior read.
        .onConflict((oc) => oc.column('key').doNothing()),
    ),
    rowByKey: prepare<OutboxRow>(db, q.selectFrom('outbox').selectAll().where('key', '=', param('key'))),
    rowById: prepare<OutboxRow>(db, q.selectFrom('outbox').selectAll().where('id', '=', param('id'))),
    lastSeq: prepare<{ last: number | null }>(
      db,
      q
        .selectFrom('outbox')
        .select((eb) => eb.fn.max('seq').as('last'))
        .where('run_id', '=', param('runId'))
        .where('task', '=', param('task'))
        .where('attempt', '=', param('attempt')),
    ),
    pending: prepare<OutboxRow>(
      db,
      q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('pending')).orderBy('id').limit(param('limit')),
    ),
    hasPending: prepare<{ id: number }>(
      db,
      q.selectFrom('outbox').select('id').where('state', '=', sql.lit('pending')).limit(sql.lit(1)),
    ),
    countPending: prepare<{ count: number }>(
      db,
      q.selectFrom('outbox').select((eb) => eb.fn.countAll<number>().as('count')).where('state', '=', sql.lit('pending')),
    ),
    countDead: prepare<{ count: number }>(
      db,
      q.selectFrom('outbox').select((eb) => eb.fn.countAll<number>().as('count')).where('state', '=', sql.lit('dead')),
    ),
    markDelivered: prepare(
      db,
      q
        .updateTable('outbox')
        .set({
          state: sql.lit('delivered'),
          event_id: param('eventId'),
          event_ts: param('timestamp'),
          duplicate: param('duplicate'),
          settled_at: param('now'),
        })
        .where((eb) => eb.and(sentRow))
        .where('state', '=', sql.lit('pending')),
    ),
    markDead: prepare(
      db,
      q
        .updateTable('outbox')
        .set({ state: sql.lit('dead'), dead_code: param('code'), dead_reason: param('reason'), settled_at: param('now') })
        .where((eb) => eb.and(sentRow))
        .where('state', '=', sql.lit('pending')),
    ),
    getCheckpoint: prepare<{ value: string }>(
      db,
      q.selectFrom('checkpoints').select('value').where('name', '=', param('name')),
    ),
    setCheckpoint: prepare(
      db,
      q
        .insertInto('checkpoints')
        .values({ name: param('name'), value: param('value'), updated_at: param('now') })
        .onConflict((oc) => oc.column('name').doUpdateSet({ value: param('value'), updated_at: param('now') })),
    ),
    countByState: prepare<{ kind: string; state: RowState; count: number; oldest: number | null }>(
      db,
      q
        .selectFrom('outbox')
        .select((eb) => ['kind', 'state', eb.fn.countAll<number>().as('count'), eb.fn.min('committed_at').as('oldest')])
        .groupBy(['kind', 'state']),
    ),
    deadRows: prepare<OutboxRow>(
      db,
      q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('dead')).orderBy('id').limit(param('limit')),
    ),
    getLease: prepare<{ owner: string; pid: number; host: string; expires_at: number }>(
      db,
      q.selectFrom('lease').select(['owner', 'pid', 'host', 'expires_at']).where('id', '=', sql.lit(1)),
    ),
    takeLease: prepare(
      db,
      q
        .insertInto('lease')
        .values({ id: sql.lit(1), owner: param('owner'), pid: param('pid'), host: param('host'), expires_at: param('expiresAt') })
        .onConflict((oc) =>
          oc.column('id').doUpdateSet({
            owner: param('owner'),
            pid: param('pid'),
            host: param('host'),
            expires_at: param('expiresAt'),
          }),
        ),
    ),
    // Renewing is also the proof of holding: it changes no row when another relay took the lease.
    renewLease: prepare(
      db,
      q
        .updateTable('lease')
        .set({ expires_at: param('expiresAt') })
        .where('id', '=', sql.lit(1))
        .where('owner', '=', param('owner')),
    ),
    releaseLease: prepare(db, q.deleteFrom('lease').where('id', '=', sql.lit(1)).where('owner', '=', param('owner'))),
    // A fenced attempt's remaining rows are parked at once: none of them may be delivered any more.
    parkStream: prepare(
      db,
      q
        .updateTable('outbox')
        .set({ state: sql.lit('dead'), dead_code: param('code'), dead_reason: param('reason'), settled_at: param('now') })
        .where('state', '=', sql.lit('pending'))
        .where('run_id', '=', param('runId'))
        .where('task', '=', param('task'))
        .where('attempt', '=', param('attempt'))
        .returning('id'),
    ),
    highestAttemptWithRows: prepare<{ attempt: number | null }>(
      db,
      q.selectFrom('outbox').select((eb) => eb.fn.max('attempt').as('attempt')).where((eb) => eb.and(ofRun)),
    ),
    getRun: prepare<{ opened_by: number; fenced_by: number }>(
      db,
      q.selectFrom('runs').select(['opened_by', 'fenced_by']).where((eb) => eb.and(ofRun)),
    ),
    openRun: prepare(
      db,
      q
        .insertInto('runs')
        .values({ ...ofRun, opened_by: param('attempt') })
        .onConflict((oc) => oc.columns(['run_id', 'task']).doUpdateSet({ opened_by: param('attempt') })),
    ),
    fenceRun: prepare(
      db,
      q
        .insertInto('runs')
        .values({ ...ofRun, opened_by: sql.lit(0), fenced_by: param('by') })
        .onConflict((oc) => oc.columns(['run_id', 'task']).doUpdateSet({ fenced_by: sql<number>`max(fenced_by, ${param('by')})` })),
    ),
    // In commit order: a newer attempt takes them over, renumbered in this order.
    undeliveredOfOlderAttempts: prepare<{ id: number }>(
      db,
      q
        .selectFrom('outbox')
        .select('id')
        .where((eb) => eb.and(ofRun))
        .where('attempt', '<', param('attempt'))
        .where((eb) =>
          eb.or([eb('state', '=', sql.lit('pending')), eb.and([eb('state', '=', sql.lit('dead')), eb('dead_code', '=', sql.lit('fenced'))])]),
        )
        .orderBy('id'),
    ),
    adoptRow: prepare(
      db,
      q
        .updateTable('outbox')
        .set({
          attempt: param('attempt'),
          seq: param('seq'),
          state: sql.lit('pending'),
          dead_code: sql.lit(null),
          dead_reason: sql.lit(null),
          settled_at: sql.lit(null),
        })
        .where('id', '=', param('id')),
    ),
    // The newest row of each stream stays: a reopened attempt numbers its next rows from it.
    pruneDelivered: prepare(
      db,
      q
        .deleteFrom('outbox')
        .where('id', 'in', (sub) =>
          sub
            .selectFrom('outbox')
            .select('id')
            .where('state', '=', sql.lit('delivered'))
            .where('settled_at', '<', param('cutoff'))
            .where('id', 'not in', (newest) => newest.selectFrom('outbox').select((eb) => eb.fn.max('id').as('id')).groupBy(['run_id', 'task', 'attempt']))
            .limit(param('limit')),
        ),
    ),
    anyCheckpoint: prepare<{ name: string }>(db, q.selectFrom('checkpoints').select('name').limit(sql.lit(1))),
  };
}

/** @internal */
export type OutboxStatements = ReturnType<typeof prepareStatements>;
