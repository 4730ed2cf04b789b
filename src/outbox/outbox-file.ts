import { existsSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import { OutboxFileError, SchemaTooNewError, WrongOutboxFileError } from '../protocol/errors.js';
import { migrateSqlite } from '../sqlite/migrate.js';
import { openSqlite, type Durability } from '../sqlite/open.js';
import { params, prepare, prepareConstant, queryBuilder } from '../sqlite/statements.js';
import { FileMeta } from './file-meta.js';
import type { KeyScope, NewRow, OfAttempt, OfRun, OutboxSchema, RowKind, RowState, SentRow } from './file-schema.js';
import { lifecycleStatements, type LifecycleStatements } from './lifecycle-statements.js';
import { outboxMigrations } from './migrations.js';
import { RunAttempts } from './run-attempts.js';

export type { KeyScope, NewRow, OfAttempt, OfRun, OutboxRow, OutboxSchema, RowKind, RowState } from './file-schema.js';

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
  /** What the file keeps about itself: its producer, its last run, the relay's last error. */
  readonly meta: FileMeta;
  /** Emissions held for a run's success, and each attempt's outcome. */
  readonly lifecycle: LifecycleStatements;

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
      this.lifecycle = lifecycleStatements(this.db);
    } catch (error) {
      this.db.close();
      throw error instanceof SchemaTooNewError ? error : new OutboxFileError(path, error);
    }
    this.runs = new RunAttempts(this.db, this.lifecycle, this.statements.lastSeq);
    const s = this.statements;
    this.meta = new FileMeta({ read: (name) => s.getMeta.get({ name })?.value, write: (name, value) => s.setMeta.run({ name, value }) });
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


  /**
   * Binds a new file to its producer, and refuses to open one that belongs to another: two producers
   * sharing a file would share stream positions and keys.
   */
  bindProducer(producer: string): void {
    this.db
      .transaction(() => {
        const owner = this.meta.read('producer');
        if (owner === undefined) this.meta.write('producer', producer);
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

// Rows found by each key index: their own scope, and the rows from before scopes existed.
const PARTITION_SCOPES = [sql.lit<KeyScope>('partition'), sql.lit<KeyScope>('legacy')];
const FILE_SCOPES = [sql.lit<KeyScope>('file'), sql.lit<KeyScope>('legacy')];

function prepareStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const run = params<OfRun>();
  const ofRun = { run_id: run.runId, task: run.task };
  const attempt = params<OfAttempt>();
  const ofAttempt = { ...ofRun, attempt: attempt.attempt };
  const p = {
    name: params<{ name: string }>(),
    meta: params<{ name: string; value: string }>(),
    row: params<NewRow>(),
    id: params<{ id: number }>(),
    key: params<{ key: string }>(),
    partitionKey: params<OfRun & { asset: string; partitionKey: string; key: string }>(),
    limit: params<{ limit: number }>(),
    // A row is marked only while it is still where the relay sent it from: a newer attempt that took it
    // over (renumbered it) in the meantime delivers it again as its own.
    delivered: params<SentRow & { eventId: string | null; timestamp: string | null; duplicate: number | null; now: number }>(),
    dead: params<SentRow & { code: string; reason: string; now: number }>(),
    checkpointOf: params<OfRun & { name: string }>(),
    checkpoint: params<OfRun & { name: string; value: string; now: number }>(),
    lease: params<{ owner: string; pid: number; host: string; expiresAt: number }>(),
    renewal: params<{ owner: string; expiresAt: number }>(),
    owner: params<{ owner: string }>(),
    park: params<OfAttempt & { code: string; reason: string; now: number }>(),
    prune: params<{ cutoff: number; limit: number }>(),
    coalesce: params<OfAttempt & { name: string }>(),
    revise: params<{ id: number; value: string }>(),
  };
  const sentRow = { id: p.delivered.id, attempt: p.delivered.attempt, seq: p.delivered.seq, revision: p.delivered.revision };
  const insertRow = () =>
    q.insertInto('outbox').values({
      key: p.row.key,
      key_scope: p.row.keyScope,
      fingerprint: p.row.fingerprint,
      workflow: p.row.workflow,
      run_id: p.row.runId,
      task: p.row.task,
      attempt: p.row.attempt,
      seq: p.row.seq,
      kind: p.row.kind,
      asset: p.row.asset,
      partition_key: p.row.partitionKey,
      partition_date: p.row.partitionDate,
      extra: p.row.extra,
      committed_at: p.row.committedAt,
      checkpoint_name: p.row.checkpointName,
      checkpoint_value: p.row.checkpointValue,
      trace_context: p.row.traceContext,
      cause_cursor: p.row.causeCursor,
    });
  return {
    getMeta: prepare(db, p.name, q.selectFrom('meta').select('value').where('name', '=', p.name.name)),
    setMeta: prepare(
      db,
      p.meta,
      q
        .insertInto('meta')
        .values({ name: p.meta.name, value: p.meta.value })
        .onConflict((oc) => oc.column('name').doUpdateSet({ value: p.meta.value })),
    ),
    // Insert first: a key already in the file is caught by its scope's unique index, not by a prior read.
    insertPartitionRow: prepare(
      db,
      p.row,
      insertRow().onConflict((oc) =>
        oc.columns(['run_id', 'task', 'asset', 'partition_key', 'key']).where('key_scope', 'in', PARTITION_SCOPES).doNothing(),
      ),
    ),
    insertFileRow: prepare(
      db,
      p.row,
      insertRow().onConflict((oc) => oc.column('key').where('key_scope', 'in', FILE_SCOPES).doNothing()),
    ),
    // A checkpoint update's key is its stream position, which the stream's unique index guards.
    insertStreamRow: prepare(db, p.row, insertRow()),
    rowByPartitionKey: prepare(
      db,
      p.partitionKey,
      q
        .selectFrom('outbox')
        .selectAll()
        .where((eb) =>
          eb.and({ run_id: p.partitionKey.runId, task: p.partitionKey.task, asset: p.partitionKey.asset, partition_key: p.partitionKey.partitionKey, key: p.partitionKey.key }),
        )
        .where('key_scope', 'in', PARTITION_SCOPES),
    ),
    rowByFileKey: prepare(db, p.key, q.selectFrom('outbox').selectAll().where('key', '=', p.key.key).where('key_scope', 'in', FILE_SCOPES)),
    rowById: prepare(db, p.id, q.selectFrom('outbox').selectAll().where('id', '=', p.id.id)),
    lastSeq: prepare(
      db,
      attempt,
      q
        .selectFrom('outbox')
        .select((eb) => eb.fn.max('seq').as('last'))
        .where((eb) => eb.and(ofAttempt)),
    ),
    pending: prepare(db, p.limit, q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('pending')).orderBy('id').limit(p.limit.limit)),
    hasPending: prepareConstant(db, q.selectFrom('outbox').select('id').where('state', '=', sql.lit('pending')).limit(sql.lit(1))),
    countPending: prepareConstant(
      db,
      q.selectFrom('outbox').select((eb) => eb.fn.countAll<number>().as('count')).where('state', '=', sql.lit('pending')),
    ),
    countDead: prepareConstant(db, q.selectFrom('outbox').select((eb) => eb.fn.countAll<number>().as('count')).where('state', '=', sql.lit('dead'))),
    markDelivered: prepare(
      db,
      p.delivered,
      q
        .updateTable('outbox')
        .set({
          state: sql.lit('delivered'),
          event_id: p.delivered.eventId,
          event_ts: p.delivered.timestamp,
          duplicate: p.delivered.duplicate,
          settled_at: p.delivered.now,
        })
        .where((eb) => eb.and(sentRow))
        .where('state', '=', sql.lit('pending')),
    ),
    markDead: prepare(
      db,
      p.dead,
      q
        .updateTable('outbox')
        .set({ state: sql.lit('dead'), dead_code: p.dead.code, dead_reason: p.dead.reason, settled_at: p.dead.now })
        .where((eb) => eb.and(sentRow))
        .where('state', '=', sql.lit('pending')),
    ),
    // A run's task has checkpoints of its own: several runs and tasks may share a file (outbox migration 011).
    getCheckpoint: prepare(
      db,
      p.checkpointOf,
      q
        .selectFrom('checkpoints')
        .select('value')
        .where((eb) => eb.and({ run_id: p.checkpointOf.runId, task: p.checkpointOf.task, name: p.checkpointOf.name })),
    ),
    setCheckpoint: prepare(
      db,
      p.checkpoint,
      q
        .insertInto('checkpoints')
        .values({ run_id: p.checkpoint.runId, task: p.checkpoint.task, name: p.checkpoint.name, value: p.checkpoint.value, updated_at: p.checkpoint.now })
        .onConflict((oc) => oc.columns(['run_id', 'task', 'name']).doUpdateSet({ value: p.checkpoint.value, updated_at: p.checkpoint.now })),
    ),
    countByState: prepareConstant(
      db,
      q
        .selectFrom('outbox')
        .select((eb) => ['kind', 'state', eb.fn.countAll<number>().as('count'), eb.fn.min('committed_at').as('oldest')])
        .groupBy(['kind', 'state']),
    ),
    deadRows: prepare(db, p.limit, q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('dead')).orderBy('id').limit(p.limit.limit)),
    getLease: prepareConstant(db, q.selectFrom('lease').select(['owner', 'pid', 'host', 'expires_at']).where('id', '=', sql.lit(1))),
    takeLease: prepare(
      db,
      p.lease,
      q
        .insertInto('lease')
        .values({ id: sql.lit(1), owner: p.lease.owner, pid: p.lease.pid, host: p.lease.host, expires_at: p.lease.expiresAt })
        .onConflict((oc) =>
          oc.column('id').doUpdateSet({ owner: p.lease.owner, pid: p.lease.pid, host: p.lease.host, expires_at: p.lease.expiresAt }),
        ),
    ),
    // Renewing is also the proof of holding: it changes no row when another relay took the lease.
    renewLease: prepare(
      db,
      p.renewal,
      q.updateTable('lease').set({ expires_at: p.renewal.expiresAt }).where('id', '=', sql.lit(1)).where('owner', '=', p.renewal.owner),
    ),
    releaseLease: prepare(db, p.owner, q.deleteFrom('lease').where('id', '=', sql.lit(1)).where('owner', '=', p.owner.owner)),
    // A fenced attempt's remaining rows are parked at once: none of them may be delivered any more.
    parkStream: prepare(
      db,
      p.park,
      q
        .updateTable('outbox')
        .set({ state: sql.lit('dead'), dead_code: p.park.code, dead_reason: p.park.reason, settled_at: p.park.now })
        .where('state', '=', sql.lit('pending'))
        .where((eb) => eb.and(ofAttempt))
        .returning('id'),
    ),
    // The newest row of each stream stays: a reopened attempt numbers its next rows from it.
    pruneDelivered: prepare(
      db,
      p.prune,
      q
        .deleteFrom('outbox')
        .where('id', 'in', (sub) =>
          sub
            .selectFrom('outbox')
            .select('id')
            .where('state', '=', sql.lit('delivered'))
            .where('settled_at', '<', p.prune.cutoff)
            .where('id', 'not in', (newest) => newest.selectFrom('outbox').select((eb) => eb.fn.max('id').as('id')).groupBy(['run_id', 'task', 'attempt']))
            .limit(p.prune.limit),
        ),
    ),
    // The stream's newest pending update of this checkpoint when no emission follows it: a
    // checkpoint-only commit rewrites it instead of adding a row, and no value moves past an emission.
    coalescibleCheckpoint: prepare(
      db,
      p.coalesce,
      q
        .selectFrom('outbox')
        .select('id')
        .where((eb) =>
          eb.and({
            run_id: p.coalesce.runId,
            task: p.coalesce.task,
            attempt: p.coalesce.attempt,
            kind: sql.lit<RowKind>('checkpoint'),
            state: sql.lit<RowState>('pending'),
            checkpoint_name: p.coalesce.name,
          }),
        )
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('outbox as later')
                .select(sql.lit(1).as('one'))
                .whereRef('later.run_id', '=', 'outbox.run_id')
                .whereRef('later.task', '=', 'outbox.task')
                .whereRef('later.attempt', '=', 'outbox.attempt')
                .whereRef('later.seq', '>', 'outbox.seq')
                .where('later.kind', '<>', sql.lit<RowKind>('checkpoint')),
            ),
          ),
        )
        .orderBy('seq', 'desc')
        .limit(sql.lit(1)),
    ),
    reviseCheckpointRow: prepare(
      db,
      p.revise,
      q
        .updateTable('outbox')
        // committed_at stays: the row has waited since its first commit, and the status says so.
        .set({ checkpoint_value: p.revise.value, revision: sql`revision + 1` })
        .where('id', '=', p.revise.id)
        .where('state', '=', sql.lit('pending')),
    ),
    runHasCheckpoint: prepare(db, run, q.selectFrom('checkpoints').select('name').where((eb) => eb.and(ofRun)).limit(sql.lit(1))),
  };
}

/** @internal */
export type OutboxStatements = ReturnType<typeof prepareStatements>;
