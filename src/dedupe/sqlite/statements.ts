import type Database from 'better-sqlite3';
import { sql, type Generated } from 'kysely';
import { params, prepare, prepareConstant, queryBuilder } from '../../sqlite/statements.js';
import type { RecordedStatus } from '../ingest/resolve.js';
import type { EventRow, OfAttempt, OfStream, SharedTables, StoredRunOutcome } from '../tables.js';
import type { ClaimedEventRow } from './claimed-event.js';

export interface ServerSchema extends SharedTables {
  events: Omit<EventRow, 'cursor'> & {
    cursor: Generated<number>;
    /** The event's dedupe record (migration 012): its payload's fingerprint, NULL for an event stored before it without a record. */
    fingerprint: string | null;
    /** When its key was stored (milliseconds), while the key is inside the dedupe window; NULL once released. */
    created_at: number | null;
    duplicates: Generated<number>;
    /** Where the key is filed (migration 013): its run's slot for a key of the run alone, else 0. */
    run_slot: Generated<number>;
    /** With run_slot: the partition key a key of the run is filed under; '' at slot 0. */
    filed_partition: Generated<string>;
  };
}

/**
 * Every statement of the embedded store, compiled and prepared once when it opens.
 * It is long because it is a list, one entry per prepared statement, each read on its own; split, the statements of one table would scatter.
 */
export function serverStatements(db: Database.Database) {
  const q = queryBuilder<ServerSchema>(db);
  const stream = params<OfStream>();
  const attempt = params<OfAttempt>();
  const ofStream = { producer: stream.producer, run_id: stream.runId, task: stream.task };
  const ofAttempt = { ...ofStream, attempt: attempt.attempt };

  const p = {
    seq: params<OfAttempt & { lastSeq: number; ts: string }>(),
    count: params<OfAttempt & { n: number }>(),
    assetCount: params<{ asset: string; n: number }>(),
    outcome: params<OfStream & { outcome: StoredRunOutcome; outcomeAttempt: number }>(),
    fence: params<OfAttempt & { fencedBy: number; items: number; ts: string }>(),
    epoch: params<OfAttempt & { ts: string }>(),
    touch: params<OfStream & { ts: string }>(),
    position: params<OfAttempt & { seq: number }>(),
    key: params<{ producer: string; key: string }>(),
    /** A key at one place of the key index (key-places.ts). */
    filedKey: params<{ producer: string; slot: number; partition: string; key: string }>(),
    event: params<ClaimedEventRow>(),
    cursor: params<{ cursor: number }>(),
    /** `cursors`: a JSON array of event cursors. */
    cursors: params<{ cursors: string }>(),
    recorded: params<
      OfAttempt & { seq: number; key: string; status: RecordedStatus; code: string; detail: string; field: string | null; createdAt: number; asset: string | null; partitionKey: string | null }
    >(),
    checkpoint: params<OfAttempt & { name: string; value: string; seq: number; revision: number; ts: string }>(),
    page: params<{ after: number; limit: number }>(),
    runTasks: params<{ producer: string; runId: string; limit: number }>(),
    assetPage: params<{ after: number; limit: number; asset: string }>(),
    /** `assets`: a JSON array of asset names. */
    assetsPage: params<{ after: number; limit: number; assets: string }>(),
    asset: params<{ name: string; createdAt: string }>(),
    /** Rows created before `cutoff` (milliseconds). */
    compactCreated: params<{ cutoff: number; limit: number }>(),
    /** Events stamped before `cutoff` (an ISO timestamp). */
    compactStamped: params<{ cutoff: string; limit: number }>(),
  };

  // An item's recorded outcome, at its position or (stream_refusals) beside it.
  const recordInto = (table: 'stream_outcomes' | 'stream_refusals') =>
    q
      .insertInto(table)
      .values({
        producer: p.recorded.producer,
        run_id: p.recorded.runId,
        task: p.recorded.task,
        attempt: p.recorded.attempt,
        seq: p.recorded.seq,
        key: p.recorded.key,
        status: p.recorded.status,
        code: p.recorded.code,
        detail: p.recorded.detail,
        field: p.recorded.field,
        created_at: p.recorded.createdAt,
        asset: p.recorded.asset,
        partition_key: p.recorded.partitionKey,
      })
      .onConflict((oc) => oc.doNothing());

  return {
    lastSeq: prepare(db, attempt, q.selectFrom('stream_seqs').select('last_seq').where((eb) => eb.and(ofAttempt))),
    saveLastSeq: prepare(
      db,
      p.seq,
      q
        .insertInto('stream_seqs')
        .values({ producer: p.seq.producer, run_id: p.seq.runId, task: p.seq.task, attempt: p.seq.attempt, last_seq: p.seq.lastSeq, first_at: p.seq.ts, last_at: p.seq.ts })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet({ last_seq: p.seq.lastSeq, last_at: p.seq.ts })),
    ),
    // The catalog's counts, written only when a retry was absorbed, a run ended or a zombie was fenced.
    countDuplicate: prepare(
      db,
      p.filedKey,
      q
        .updateTable('events')
        .set((eb) => ({ duplicates: eb('duplicates', '+', sql.lit(1)) }))
        .where((eb) => eb.and({ producer: p.filedKey.producer, run_slot: p.filedKey.slot, filed_partition: p.filedKey.partition, key: p.filedKey.key }))
        .where('created_at', 'is not', null),
    ),
    countKeptDuplicate: prepare(
      db,
      p.key,
      q.updateTable('dedupe').set((eb) => ({ duplicates: eb('duplicates', '+', sql.lit(1)) })).where((eb) => eb.and({ producer: p.key.producer, key: p.key.key })),
    ),
    countAttemptDuplicates: prepare(
      db,
      p.count,
      q
        .updateTable('stream_seqs')
        .set((eb) => ({ duplicates: eb('duplicates', '+', p.count.n) }))
        .where((eb) => eb.and({ producer: p.count.producer, run_id: p.count.runId, task: p.count.task, attempt: p.count.attempt })),
    ),
    countAssetDuplicates: prepare(
      db,
      p.assetCount,
      q
        .insertInto('asset_rollup')
        .values({ asset: p.assetCount.asset, duplicates: p.assetCount.n })
        .onConflict((oc) => oc.column('asset').doUpdateSet((eb) => ({ duplicates: eb('asset_rollup.duplicates', '+', eb.ref('excluded.duplicates')) }))),
    ),
    saveRunOutcome: prepare(
      db,
      p.outcome,
      q
        .updateTable('streams')
        .set({ outcome: p.outcome.outcome, outcome_attempt: p.outcome.outcomeAttempt })
        .where((eb) => eb.and({ producer: p.outcome.producer, run_id: p.outcome.runId, task: p.outcome.task }))
        // A success is final: a late failure of an older attempt does not undo it.
        .where((eb) => eb.or([eb('outcome', 'is', null), eb('outcome', '<>', sql.lit('succeeded'))]))
        // Nor does an earlier attempt's failure undo what a later attempt said.
        .where('outcome_attempt', '<=', p.outcome.outcomeAttempt),
    ),
    recordFence: prepare(
      db,
      p.fence,
      q
        .insertInto('stream_fences')
        .values({ producer: p.fence.producer, run_id: p.fence.runId, task: p.fence.task, attempt: p.fence.attempt, fenced_by: p.fence.fencedBy, items: p.fence.items, last_at: p.fence.ts })
        .onConflict((oc) =>
          oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet((eb) => ({
            items: eb('stream_fences.items', '+', eb.ref('excluded.items')),
            fenced_by: eb.ref('excluded.fenced_by'),
            last_at: eb.ref('excluded.last_at'),
          })),
        ),
    ),
    // Insert first: the unique key of the keys inside the window decides who is first, with no window
    // between a check and an insert. The event row is its own dedupe record.
    claimEvent: prepare(
      db,
      p.event,
      q
        .insertInto('events')
        .values({
          event_id: p.event.eventId,
          key: p.event.key,
          ts: p.event.ts,
          asset: p.event.asset,
          partition_key: p.event.partitionKey,
          partition_date: p.event.partitionDate,
          extra: p.event.extra,
          producer: p.event.producer,
          workflow: p.event.workflow,
          run_id: p.event.runId,
          task: p.event.taskOrNull,
          attempt: p.event.attempt,
          seq: p.event.seq,
          trace_context: p.event.traceContext,
          caused_by: p.event.causedBy,
          depth: p.event.depth,
          lineage: p.event.lineage,
          fingerprint: p.event.fingerprint,
          created_at: p.event.createdAt,
          run_slot: p.event.runSlot,
          filed_partition: p.event.filedPartition,
        })
        .onConflict((oc) => oc.columns(['producer', 'run_slot', 'filed_partition', 'key']).where('created_at', 'is not', null).doNothing()),
    ),
    // The record of a key inside the window at one place of the key index (key-places.ts).
    findFiled: prepare(
      db,
      p.filedKey,
      q
        .selectFrom('events')
        .select(['fingerprint', 'event_id', 'ts'])
        .where((eb) => eb.and({ producer: p.filedKey.producer, run_slot: p.filedKey.slot, filed_partition: p.filedKey.partition, key: p.filedKey.key }))
        .where('created_at', 'is not', null),
    ),
    /** A record that outlived its event (event retention shorter than the dedupe window). */
    findKeptRecord: prepare(
      db,
      p.key,
      q.selectFrom('dedupe').select(['fingerprint', 'event_id', 'ts']).where((eb) => eb.and({ producer: p.key.producer, key: p.key.key })),
    ),
    causeEvent: prepare(
      db,
      p.cursor,
      q.selectFrom('events').select(['event_id', 'asset', 'partition_key', 'depth', 'lineage']).where('cursor', '=', p.cursor.cursor),
    ),
    insertOutcome: prepare(db, p.recorded, recordInto('stream_outcomes')),
    // A refusal that holds no position: once per item and code, however often it is sent again.
    insertRefusal: prepare(db, p.recorded, recordInto('stream_refusals')),
    findOutcome: prepare(
      db,
      p.position,
      q
        .selectFrom('stream_outcomes')
        .select(['key', 'status', 'code', 'detail', 'field'])
        .where((eb) => eb.and({ ...ofAttempt, seq: p.position.seq })),
    ),
    eventsAll: prepare(db, p.page, q.selectFrom('events').selectAll().where('cursor', '>', p.page.after).orderBy('cursor').limit(p.page.limit)),
    // A token limited to some assets that names none reads all of those: the list travels as one JSON array.
    eventsOfAssets: prepare(
      db,
      p.assetsPage,
      q
        .selectFrom('events')
        .selectAll()
        .where(sql<boolean>`asset IN (SELECT value FROM json_each(${p.assetsPage.assets}))`)
        .where('cursor', '>', p.assetsPage.after)
        .orderBy('cursor')
        .limit(p.assetsPage.limit),
    ),
    eventsByAsset: prepare(
      db,
      p.assetPage,
      q
        .selectFrom('events')
        .selectAll()
        .where('asset', '=', p.assetPage.asset)
        .where('cursor', '>', p.assetPage.after)
        .orderBy('cursor')
        .limit(p.assetPage.limit),
    ),
    insertAsset: prepare(
      db,
      p.asset,
      q
        .insertInto('assets')
        .values({ name: p.asset.name, created_at: p.asset.createdAt })
        .onConflict((oc) => oc.column('name').doNothing()),
    ),
    allAssets: prepareConstant(db, q.selectFrom('assets').select('name').orderBy('name')),
    countEvents: prepareConstant(db, q.selectFrom('events').select((eb) => eb.fn.countAll<number>().as('n'))),
    countKeys: prepareConstant(db, q.selectFrom('events').select((eb) => eb.fn.countAll<number>().as('n')).where('created_at', 'is not', null)),
    countKeptRecords: prepareConstant(db, q.selectFrom('dedupe').select((eb) => eb.fn.countAll<number>().as('n'))),
    // Row values in IN: kysely's builder has no typed form for them, so these two are raw templates.
    compactDedupe: prepare(
      db,
      p.compactCreated,
      {
        compile: () =>
          sql`DELETE FROM dedupe WHERE (producer, key) IN (
                SELECT producer, key FROM dedupe WHERE created_at < ${p.compactCreated.cutoff} LIMIT ${p.compactCreated.limit})`.compile(q),
      },
    ),
    // The key of an event older than the dedupe window no longer answers a retry, as its record's removal did.
    releaseKeys: prepare(
      db,
      p.compactCreated,
      q
        .updateTable('events')
        .set({ created_at: sql<null>`NULL` })
        .where('cursor', 'in', (sub) => sub.selectFrom('events').select('cursor').where('created_at', '<', p.compactCreated.cutoff).limit(p.compactCreated.limit)),
    ),
    compactOutcomes: prepare(
      db,
      p.compactCreated,
      {
        compile: () =>
          sql`DELETE FROM stream_outcomes WHERE (producer, run_id, task, attempt, seq) IN (
                SELECT producer, run_id, task, attempt, seq FROM stream_outcomes WHERE created_at < ${p.compactCreated.cutoff} LIMIT ${p.compactCreated.limit})`.compile(q),
      },
    ),
    compactRefusals: prepare(db, p.compactCreated, {
      compile: () =>
        sql`DELETE FROM stream_refusals WHERE (producer, run_id, task, attempt, seq, key, code) IN (
              SELECT producer, run_id, task, attempt, seq, key, code FROM stream_refusals WHERE created_at < ${p.compactCreated.cutoff} LIMIT ${p.compactCreated.limit})`.compile(q),
    }),
    // The oldest events by cursor, up to the first one still inside retention: retention removes a prefix
    // of the log, so that what is left of each asset is its newest events (the catalog counts a group's lag
    // from that), even when a clock stepped back stamped a later event older.
    oldEvents: prepare(db, p.compactStamped, {
      compile: () =>
        sql<{ cursor: number }>`
          WITH head AS (SELECT cursor, ts FROM events ORDER BY cursor LIMIT ${p.compactStamped.limit})
          SELECT cursor FROM head
          WHERE cursor < coalesce((SELECT min(cursor) FROM head WHERE ts >= ${p.compactStamped.cutoff}), 9223372036854775807)`.compile(q),
    }),
    // An event removed while its key is inside the dedupe window leaves its record behind: a retry is still
    // answered with the receipt it was given.
    keepRecords: prepare(
      db,
      p.cursors,
      q
        .insertInto('dedupe')
        .columns(['producer', 'key', 'fingerprint', 'event_id', 'ts', 'created_at', 'duplicates'])
        .expression((eb) =>
          eb
            .selectFrom('events')
            .select(['producer', 'key', sql<string>`fingerprint`.as('fingerprint'), 'event_id', 'ts', sql<number>`created_at`.as('created_at'), 'duplicates'])
            .where(sql<boolean>`cursor IN (SELECT value FROM json_each(${p.cursors.cursors}))`)
            .where('created_at', 'is not', null),
        )
        .onConflict((oc) => oc.doNothing()),
    ),
    removeEvents: prepare(
      db,
      p.cursors,
      q
        .deleteFrom('events')
        .where(sql<boolean>`cursor IN (SELECT value FROM json_each(${p.cursors.cursors}))`)
        // What the catalog's counts must forget.
        .returning(['asset', 'partition_key', 'cursor']),
    ),
    epoch: prepare(db, stream, q.selectFrom('streams').select('epoch').where((eb) => eb.and(ofStream))),
    idleStreams: prepare(
      db,
      p.compactStamped,
      q.selectFrom('streams').select(['producer', 'run_id', 'task']).where('updated_at', '<', p.compactStamped.cutoff).limit(p.compactStamped.limit),
    ),
    forgetStreamSeqs: prepare(db, stream, q.deleteFrom('stream_seqs').where((eb) => eb.and(ofStream))),
    forgetStreamCheckpoints: prepare(db, stream, q.deleteFrom('stream_checkpoints').where((eb) => eb.and(ofStream))),
    forgetStreamFences: prepare(db, stream, q.deleteFrom('stream_fences').where((eb) => eb.and(ofStream))),
    forgetStream: prepare(db, stream, q.deleteFrom('streams').where((eb) => eb.and(ofStream))),
    touchStream: prepare(db, p.touch, q.updateTable('streams').set({ updated_at: p.touch.ts }).where((eb) => eb.and({ producer: p.touch.producer, run_id: p.touch.runId, task: p.touch.task }))),
    saveEpoch: prepare(
      db,
      p.epoch,
      q
        .insertInto('streams')
        .values({ producer: p.epoch.producer, run_id: p.epoch.runId, task: p.epoch.task, epoch: p.epoch.attempt, updated_at: p.epoch.ts })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task']).doUpdateSet({ epoch: p.epoch.attempt, updated_at: p.epoch.ts })),
    ),
    saveCheckpoint: prepare(
      db,
      p.checkpoint,
      q
        .insertInto('stream_checkpoints')
        .values({
          producer: p.checkpoint.producer,
          run_id: p.checkpoint.runId,
          task: p.checkpoint.task,
          name: p.checkpoint.name,
          value: p.checkpoint.value,
          attempt: p.checkpoint.attempt,
          seq: p.checkpoint.seq,
          revision: p.checkpoint.revision,
          updated_at: p.checkpoint.ts,
        })
        .onConflict((oc) =>
          oc.columns(['producer', 'run_id', 'task', 'name']).doUpdateSet({
            value: p.checkpoint.value,
            attempt: p.checkpoint.attempt,
            seq: p.checkpoint.seq,
            revision: p.checkpoint.revision,
            updated_at: p.checkpoint.ts,
          }),
        ),
    ),
    // Only while the revised position is still the newest of its name in this attempt, and only upwards.
    reviseCheckpoint: prepare(
      db,
      p.checkpoint,
      q
        .updateTable('stream_checkpoints')
        .set({ value: p.checkpoint.value, revision: p.checkpoint.revision, updated_at: p.checkpoint.ts })
        .where((eb) =>
          eb.and({
            producer: p.checkpoint.producer,
            run_id: p.checkpoint.runId,
            task: p.checkpoint.task,
            name: p.checkpoint.name,
            attempt: p.checkpoint.attempt,
            seq: p.checkpoint.seq,
          }),
        )
        .where('revision', '<', p.checkpoint.revision),
    ),
    streamCheckpointNames: prepare(db, stream, q.selectFrom('stream_checkpoints').select('name').where((eb) => eb.and(ofStream))),
    streamCheckpoints: prepare(db, stream, q.selectFrom('stream_checkpoints').select(['name', 'value']).where((eb) => eb.and(ofStream)).orderBy('name')),
    streamAttempts: prepare(db, stream, q.selectFrom('stream_seqs').select(['attempt', 'last_seq']).where((eb) => eb.and(ofStream)).orderBy('attempt')),
    tasksOfRun: prepare(
      db,
      p.runTasks,
      q.selectFrom('stream_seqs').select('task').distinct().where('producer', '=', p.runTasks.producer).where('run_id', '=', p.runTasks.runId).orderBy('task').limit(p.runTasks.limit),
    ),
  };
}
