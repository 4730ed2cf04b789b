import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import { ProducerErrorCode, RejectionCode } from '../../protocol/errors.js';
import { LifecycleAsset } from '../../protocol/lifecycle.js';
import { params, prepare, prepareConstant, queryBuilder } from '../../sqlite/statements.js';
import type { KeyScope, NewRow, OfAttempt, OutboxRow, OutboxSchema, RowKind, RowState, SentRow } from './schema.js';
import type { RunKey } from '../run.js';

// Rows found by each key index: their own scope, and the rows from before scopes existed.
const PARTITION_SCOPES = [sql.lit<KeyScope>('partition'), sql.lit<KeyScope>('legacy')];
const FILE_SCOPES = [sql.lit<KeyScope>('file'), sql.lit<KeyScope>('legacy')];
// A run's lifecycle notices: facts about the attempts they name, which no resume does again.
const NOTICES = [sql.lit(LifecycleAsset.Succeeded), sql.lit(LifecycleAsset.Failed), sql.lit(LifecycleAsset.Fenced)];

/**
 * The outbox table's statements: writing, reading, marking and parking rows, prepared once per file.
 * It is long because it is a list, one entry per prepared statement, each read on its own; split, the statements of one table would scatter.
 */
export function rowStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const run = params<RunKey>();
  const ofRun = { run_id: run.runId, task: run.task };
  const attempt = params<OfAttempt>();
  const ofAttempt = { ...ofRun, attempt: attempt.attempt };
  const p = {
    row: params<NewRow>(),
    id: params<{ id: number }>(),
    key: params<{ key: string }>(),
    partitionKey: params<RunKey & { asset: string; partitionKey: string; key: string }>(),
    limit: params<{ limit: number }>(),
    // A row is marked only while it is still where the relay sent it from: a newer attempt that took it
    // over (renumbered it) in the meantime delivers it again as its own.
    delivered: params<SentRow & { eventId: string | null; timestamp: string | null; duplicate: number | null; now: number }>(),
    dead: params<SentRow & { code: string; reason: string; now: number }>(),
    park: params<OfAttempt & { code: string; reason: string; now: number }>(),
    coalesce: params<OfAttempt & { name: string }>(),
    revise: params<{ id: number; value: string }>(),
    move: params<{ id: number; attempt: number; seq: number }>(),
    prune: params<{ cutoff: number; limit: number }>(),
  };
  // A row made pending again, as `attempt`'s row at `seq`: what it settled as before is forgotten.
  const pendingAgainAs = { attempt: p.move.attempt, seq: p.move.seq, state: sql.lit<RowState>('pending'), dead_code: sql.lit(null), dead_reason: sql.lit(null), settled_at: sql.lit(null) };
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
    // For a drain's progress between two full counts: rows committed since, found by the row id.
    newestId: prepareConstant(db, q.selectFrom('outbox').select((eb) => eb.fn.max('id').as('id'))),
    countEventsAfter: prepare(
      db,
      p.id,
      q.selectFrom('outbox').select((eb) => eb.fn.countAll<number>().as('count')).where('id', '>', p.id.id).where('kind', '=', sql.lit('event')),
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
    countByState: prepareConstant(
      db,
      q
        .selectFrom('outbox')
        .select((eb) => ['kind', 'state', eb.fn.countAll<number>().as('count'), eb.fn.min('committed_at').as('oldest')])
        .groupBy(['kind', 'state']),
    ),
    deadRows: prepare(db, p.limit, q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('dead')).orderBy('id').limit(p.limit.limit)),
    allDeadRows: prepareConstant(db, q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('dead')).orderBy('id')),
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
    // In commit order: a newer attempt takes them over, renumbered in this order. Pending rows, rows parked
    // because the server fenced their attempt, and lifecycle notices that a 0.1.0 server refused as invalid
    // once a retry had taken them over (it checked the notice's attempt against the delivering one's): the
    // server takes them now.
    undeliveredOfOlderAttempts: prepare(
      db,
      attempt,
      q
        .selectFrom('outbox')
        .select(['id', 'state', 'dead_code', 'asset', 'key', 'extra'])
        .where((eb) => eb.and(ofRun))
        .where('attempt', '<', attempt.attempt)
        .where((eb) =>
          eb.or([
            eb('state', '=', sql.lit('pending')),
            eb.and([eb('state', '=', sql.lit('dead')), eb('dead_code', '=', sql.lit(ProducerErrorCode.Fenced))]),
            eb.and([eb('state', '=', sql.lit('dead')), eb('dead_code', '=', sql.lit(RejectionCode.InvalidItem)), eb('asset', 'in', NOTICES)]),
          ]),
        )
        .orderBy('id'),
    ),
    // An attempt's rows not delivered, forgotten when it adopts a newer attempt's progress from the server
    // (resume.ts): that attempt resumed from before them, so their work is done again from there. Lifecycle
    // notices stay: no resume does again the failure or fence of an earlier attempt they record.
    dropUndelivered: prepare(
      db,
      attempt,
      q
        .deleteFrom('outbox')
        .where((eb) => eb.and(ofAttempt))
        .where('state', '<>', sql.lit('delivered'))
        .where((eb) => eb.or([eb('kind', '<>', sql.lit<RowKind>('event')), eb('asset', 'not in', NOTICES)])),
    ),
    // An attempt's pending rows in stream order: renumbered from 1 after a resume dropped the others.
    pendingOfAttempt: prepare(db, attempt, q.selectFrom('outbox').select('id').where((eb) => eb.and(ofAttempt)).where('state', '=', sql.lit('pending')).orderBy('seq')),
    // An older attempt's row taken over where it stands, keeping its place in the file's commit order.
    takeOver: prepare(db, p.move, q.updateTable('outbox').set(pendingAgainAs).where('id', '=', p.move.id)),
    // A dead row sent again (`oncebox dead retry`) moves to the end of the file: the relay sends pending rows by id.
    moveDeadToEnd: prepare(
      db,
      p.move,
      q
        .updateTable('outbox')
        .set({ id: sql`(SELECT max(id) + 1 FROM outbox)`, ...pendingAgainAs })
        .where('id', '=', p.move.id)
        .where('state', '=', sql.lit('dead'))
        .returning('id'),
    ),
    removeDead: prepare(db, p.id, q.deleteFrom('outbox').where('id', '=', p.id.id).where('state', '=', sql.lit('dead'))),
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
    /** The highest attempt of a run with rows in the file (null for none): the run attempts ask it. */
    highestAttempt: prepare(db, run, q.selectFrom('outbox').select((eb) => eb.fn.max('attempt').as('attempt')).where((eb) => eb.and(ofRun))),
    // Delivered rows settled before the cutoff, a batch at a time; the newest row of each attempt stays,
    // since a reopened attempt numbers its next rows from it.
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
  };
}

/** @internal */
export type RowStatements = ReturnType<typeof rowStatements>;

/** The sequence number an attempt's next row takes in its stream: one above its last, from 1. */
export function nextSeq(rows: RowStatements, of: OfAttempt): number {
  // max() always returns one row; its value is null when the attempt has none.
  return (rows.lastSeq.get(of)!.last ?? 0) + 1;
}

/** Why a dead row is dead, as the server or a fence said; a row parked before codes were kept reads 'unknown'. */
export function deathOf(row: Pick<OutboxRow, 'dead_code' | 'dead_reason'>): { code: string; reason: string } {
  return { code: row.dead_code ?? 'unknown', reason: row.dead_reason ?? '' };
}
