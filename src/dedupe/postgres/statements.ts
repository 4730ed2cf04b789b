import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { RecordedStatus } from '../ingest/resolve.js';
import type { EventRow, OfAttempt, OfStream, SharedTables, StoredRunOutcome } from '../tables.js';
import { pgParams, pgStatement } from './connection.js';

export interface PgSchema extends SharedTables {
  /**
   * `cursor` is the order of commits, given at insert (see claimEvents). The row is its key's dedupe
   * record too: `created_at` is when the key entered the window, NULL once compaction released it.
   */
  events: EventRow & { fingerprint: string | null; created_at: number | null; duplicates: number; run_slot: number; filed_partition: string };
}

const STREAM_TYPES = { producer: 'text', runId: 'text', task: 'text' } as const;

/**
 * A key of the run is filed under the first characters of its partition key only: enough for the order
 * of neighbouring partitions, and short enough that an index entry of the longest producer name fits
 * a B-tree page (PostgreSQL refuses an entry of over 2,704 bytes; a partition key may take 2,048). A
 * derived key comes with one partition key, so a prefix names its place as well as the whole would.
 */
const FILED_PARTITION = sql.lit(64);
const ATTEMPT_TYPES = { ...STREAM_TYPES, attempt: 'integer' } as const;

/**
 * The statements of the ingest transaction, each prepared once per connection.
 * It is long because it is a list, one entry per prepared statement, each read on its own; split, the statements of one table would scatter.
 */
export function ingestStatements(db: Kysely<PgSchema>) {
  const stream = pgParams<OfStream & { ts: string }>({ ...STREAM_TYPES, ts: 'text' });
  const attempt = pgParams<OfAttempt>(ATTEMPT_TYPES);
  const streamKey = pgParams<OfStream>(STREAM_TYPES);
  const where = (p: { producer: RawBuilder<string>; runId: RawBuilder<string>; task: RawBuilder<string> }) => ({
    producer: p.producer,
    run_id: p.runId,
    task: p.task,
  });

  const outcomesAt = pgParams<OfAttempt & { seqs: number[] }>({ ...ATTEMPT_TYPES, seqs: 'bigint[]' });
  // Each key with the partition its run would file it under, at the run's slot (key-places.ts); the other
  // place is the producer's.
  const records = pgParams<{ producer: string; keys: string[]; slot: number; partitions: string[] }>({
    producer: 'text',
    keys: 'uuid[]',
    slot: 'bigint',
    partitions: 'text[]',
  });
  const events = pgParams<{
    eventIds: string[];
    keys: string[];
    fingerprints: string[];
    /**
     * The run's slot, and each key's partition there (key-places.ts): a key of the run is filed there, and
     * must not be at the producer's place; any other key the reverse.
     */
    slot: number;
    runPartitions: string[];
    ofRun: boolean[];
    createdAt: number;
    assets: string[];
    partitionKeys: (string | null)[];
    partitionDates: (string | null)[];
    extras: (string | null)[];
    seqs: number[];
    traceContexts: (string | null)[];
    causedBy: (string | null)[];
    depths: number[];
    lineages: (string | null)[];
    ts: string;
    producer: string;
    workflow: string;
    runId: string;
    task: string | null;
    attempt: number;
  }>({
    eventIds: 'uuid[]',
    keys: 'uuid[]',
    fingerprints: 'text[]',
    slot: 'bigint',
    runPartitions: 'text[]',
    ofRun: 'boolean[]',
    createdAt: 'bigint',
    assets: 'text[]',
    partitionKeys: 'text[]',
    partitionDates: 'text[]',
    extras: 'text[]',
    seqs: 'bigint[]',
    traceContexts: 'text[]',
    causedBy: 'uuid[]',
    depths: 'integer[]',
    lineages: 'text[]',
    ts: 'text',
    producer: 'text',
    workflow: 'text',
    runId: 'text',
    task: 'text',
    attempt: 'integer',
  });
  const outcomes = pgParams<
    OfAttempt & {
      seqs: number[];
      keys: string[];
      statuses: RecordedStatus[];
      codes: string[];
      details: string[];
      fields: (string | null)[];
      assets: (string | null)[];
      partitionKeys: (string | null)[];
      createdAt: number;
    }
  >({
    ...ATTEMPT_TYPES,
    seqs: 'bigint[]',
    keys: 'text[]',
    statuses: 'text[]',
    codes: 'text[]',
    details: 'text[]',
    fields: 'text[]',
    assets: 'text[]',
    partitionKeys: 'text[]',
    createdAt: 'bigint',
  });
  // Items' recorded outcomes, at their positions or (stream_refusals) beside them.
  const recordInto = (table: 'stream_outcomes' | 'stream_refusals') =>
    sql`
        INSERT INTO ${sql.table(table)} (producer, run_id, task, attempt, seq, key, status, code, detail, field, asset, partition_key, created_at)
        SELECT ${outcomes.producer}, ${outcomes.runId}, ${outcomes.task}, ${outcomes.attempt}, o.*, ${outcomes.createdAt}
        FROM unnest(${outcomes.seqs}, ${outcomes.keys}, ${outcomes.statuses}, ${outcomes.codes}, ${outcomes.details}, ${outcomes.fields},
                    ${outcomes.assets}, ${outcomes.partitionKeys}) AS o
        ON CONFLICT DO NOTHING`.compile(db);
  const duplicates = pgParams<OfAttempt & { keys: string[]; assets: string[]; slot: number; partitions: string[] }>({
    ...ATTEMPT_TYPES,
    keys: 'uuid[]',
    assets: 'text[]',
    slot: 'bigint',
    partitions: 'text[]',
  });
  const runOutcome = pgParams<OfStream & { outcome: StoredRunOutcome; outcomeAttempt: number }>({ ...STREAM_TYPES, outcome: 'text', outcomeAttempt: 'integer' });
  const fence = pgParams<OfAttempt & { fencedBy: number; items: number; ts: string }>({ ...ATTEMPT_TYPES, fencedBy: 'integer', items: 'integer', ts: 'text' });
  const checkpoint = pgParams<OfAttempt & { name: string; value: string; seq: number; revision: number; ts: string }>({
    ...ATTEMPT_TYPES,
    name: 'text',
    value: 'text',
    seq: 'bigint',
    revision: 'integer',
    ts: 'text',
  });
  const lastSeq = pgParams<OfAttempt & { lastSeq: number; ts: string }>({ ...ATTEMPT_TYPES, lastSeq: 'bigint', ts: 'text' });
  const epoch = pgParams<OfStream & { epoch: number; ts: string }>({ ...STREAM_TYPES, epoch: 'integer', ts: 'text' });
  const channel = pgParams<{ channel: string; payload: string }>({ channel: 'text', payload: 'text' });
  const cursors = pgParams<{ cursors: number[] }>({ cursors: 'bigint[]' });
  const cursorLock = pgParams<{ key: string }>({ key: 'bigint' });
  const streamKeys = pgParams<{ producers: string[]; runIds: string[]; tasks: string[] }>({ producers: 'text[]', runIds: 'text[]', tasks: 'text[]' });

  return {
    // Creates the stream, or marks it active now; either way its row is locked until the transaction
    // ends. `fresh` says whether this statement inserted it (a new row has no xmax).
    openStream: pgStatement(
      'openStream',
      stream,
      db
        .insertInto('streams')
        .values({ producer: stream.producer, run_id: stream.runId, task: stream.task, epoch: sql.lit(0), updated_at: stream.ts })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task']).doUpdateSet({ updated_at: (eb) => eb.ref('excluded.updated_at') }))
        .returning(['epoch', sql<boolean>`xmax = 0`.as('fresh')])
        .compile(),
    ),
    lastSeq: pgStatement(
      'lastSeq',
      attempt,
      db.selectFrom('stream_seqs').select('last_seq').where((eb) => eb.and({ ...where(attempt), attempt: attempt.attempt })).compile(),
    ),
    recordedOutcomes: pgStatement(
      'recordedOutcomes',
      outcomesAt,
      db
        .selectFrom('stream_outcomes')
        .select(['seq', 'key', 'status', 'code', 'detail', 'field'])
        .where((eb) => eb.and({ ...where(outcomesAt), attempt: outcomesAt.attempt }))
        .where('seq', '=', sql<number>`ANY(${outcomesAt.seqs})`)
        .compile(),
    ),
    // A key's record: its event's row while the key is in the window, filed with its run or per producer,
    // or the record kept after its event; where a key has several, the first of these (rank).
    readRecords: pgStatement(
      'readRecords',
      records,
      sql<{ key: string; fingerprint: string; event_id: string; ts: string; rank: number }>`
        SELECT e.key, e.fingerprint, e.event_id, e.ts, 0 AS rank
        FROM unnest(${records.keys}, ${records.partitions}) AS k(key, part)
        JOIN events e ON e.producer = ${records.producer} AND e.run_slot = ${records.slot} AND e.filed_partition = left(k.part, ${FILED_PARTITION}) AND e.key = k.key
                     AND e.created_at IS NOT NULL
        UNION ALL
        SELECT key, fingerprint, event_id, ts, 1 FROM events
        WHERE producer = ${records.producer} AND run_slot = 0 AND filed_partition = '' AND key = ANY(${records.keys}) AND created_at IS NOT NULL
        UNION ALL
        SELECT key, fingerprint, event_id, ts, 2 FROM dedupe WHERE producer = ${records.producer} AND key = ANY(${records.keys})
        ORDER BY rank`.compile(db),
    ),
    // The rows of a group's streams that exist, locked in one order (a new stream is locked by its insert).
    lockStreams: pgStatement(
      'lockStreams',
      streamKeys,
      sql<never>`
        SELECT 1 FROM streams s
        JOIN unnest(${streamKeys.producers}, ${streamKeys.runIds}, ${streamKeys.tasks}) AS k(producer, run_id, task)
          ON s.producer = k.producer AND s.run_id = k.run_id AND s.task = k.task
        ORDER BY s.producer, s.run_id, s.task
        FOR UPDATE OF s`.compile(db),
    ),
    // The lock under which events take their cursors, held until the request commits (see claimEvents).
    lockCursors: pgStatement('lockCursors', cursorLock, sql<never>`SELECT pg_advisory_xact_lock(${cursorLock.key})`.compile(db)),
    // Claiming a key stores its event: insert first, for every new key at once, and the keys that come
    // back were this request's. A key whose record outlived its event (kept in dedupe), or that is filed
    // at its other place (key-places.ts), is not claimed: looking first is safe under the cursors' lock,
    // which every claim holds. Each event takes the next cursor (the column's default, from a sequence)
    // in the request's order.
    claimEvents: pgStatement(
      'claimEvents',
      events,
      sql<{ key: string }>`
        INSERT INTO events (event_id, key, fingerprint, run_slot, filed_partition, created_at, asset, partition_key, partition_date, extra, seq,
                            trace_context, caused_by, depth, lineage, ts, producer, workflow, run_id, task, attempt)
        SELECT e.event_id, e.key, e.fingerprint, CASE WHEN e.of_run THEN ${events.slot} ELSE 0 END, CASE WHEN e.of_run THEN left(e.run_partition, ${FILED_PARTITION}) ELSE '' END,
               ${events.createdAt}, e.asset, e.partition_key, e.partition_date, e.extra, e.seq, e.trace_context, e.caused_by, e.depth, e.lineage,
               ${events.ts}, ${events.producer}, ${events.workflow}, ${events.runId}, ${events.task}, ${events.attempt}
        FROM unnest(${events.eventIds}, ${events.keys}, ${events.fingerprints}, ${events.ofRun}, ${events.runPartitions}, ${events.assets},
                    ${events.partitionKeys}, ${events.partitionDates}, ${events.extras}, ${events.seqs}, ${events.traceContexts}, ${events.causedBy},
                    ${events.depths}, ${events.lineages})
             WITH ORDINALITY AS e(event_id, key, fingerprint, of_run, run_partition, asset, partition_key, partition_date, extra, seq, trace_context,
                                  caused_by, depth, lineage, n)
        -- OFFSET 0 keeps each NOT EXISTS a probe of the key's index entry, per item: made a join, the
        -- planner hashes the whole events table for every request while it is under a few million rows.
        WHERE NOT EXISTS (SELECT 1 FROM dedupe d WHERE d.producer = ${events.producer} AND d.key = e.key OFFSET 0)
          AND NOT EXISTS (SELECT 1 FROM events x WHERE x.producer = ${events.producer} AND x.key = e.key AND x.created_at IS NOT NULL
                            AND (x.run_slot, x.filed_partition) = (CASE WHEN e.of_run THEN 0 ELSE ${events.slot} END,
                                                                   CASE WHEN e.of_run THEN '' ELSE left(e.run_partition, ${FILED_PARTITION}) END)
                          OFFSET 0)
        ORDER BY e.n
        ON CONFLICT (producer, run_slot, filed_partition, key) WHERE created_at IS NOT NULL DO NOTHING
        RETURNING key`.compile(db),
    ),
    recordOutcomes: pgStatement('recordOutcomes', outcomes, recordInto('stream_outcomes')),
    // A refusal that holds no position: once per item and code, however often it is sent again.
    recordRefusals: pgStatement('recordRefusals', outcomes, recordInto('stream_refusals')),
    saveCheckpoint: pgStatement(
      'saveCheckpoint',
      checkpoint,
      db
        .insertInto('stream_checkpoints')
        .values({
          ...where(checkpoint),
          attempt: checkpoint.attempt,
          name: checkpoint.name,
          value: checkpoint.value,
          seq: checkpoint.seq,
          revision: checkpoint.revision,
          updated_at: checkpoint.ts,
        })
        .onConflict((oc) =>
          oc
            // The unique index of migration 014 (a name's hash: an entry of four long names would not fit).
            .expression(sql`producer, run_id, task, md5(name)`)
            .doUpdateSet({ value: checkpoint.value, attempt: checkpoint.attempt, seq: checkpoint.seq, revision: checkpoint.revision, updated_at: checkpoint.ts }),
        )
        .compile(),
    ),
    // Only while the revised position is still the newest of its name in this attempt, and only upwards.
    reviseCheckpoint: pgStatement(
      'reviseCheckpoint',
      checkpoint,
      db
        .updateTable('stream_checkpoints')
        .set({ value: checkpoint.value, revision: checkpoint.revision, updated_at: checkpoint.ts })
        .where((eb) => eb.and({ ...where(checkpoint), name: checkpoint.name, attempt: checkpoint.attempt, seq: checkpoint.seq }))
        .where('revision', '<', checkpoint.revision)
        .compile(),
    ),
    saveLastSeq: pgStatement(
      'saveLastSeq',
      lastSeq,
      db
        .insertInto('stream_seqs')
        .values({ ...where(lastSeq), attempt: lastSeq.attempt, last_seq: lastSeq.lastSeq, first_at: lastSeq.ts, last_at: lastSeq.ts })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet({ last_seq: lastSeq.lastSeq, last_at: lastSeq.ts }))
        .compile(),
    ),
    // The catalog's counts, written only when a retry was absorbed, a run ended or a zombie was fenced:
    // each key's record, the attempt's count and each asset's, in one statement.
    countDuplicates: pgStatement(
      'countDuplicates',
      duplicates,
      sql<never>`
        WITH absorbed AS (
          SELECT key, asset, left(part, ${FILED_PARTITION}) AS part
          FROM unnest(${duplicates.keys}, ${duplicates.assets}, ${duplicates.partitions}) AS d(key, asset, part)),
        times AS (SELECT key, part, count(*)::int AS n FROM absorbed GROUP BY key, part),
        -- Counted where the key's record is, at the first place that has it (as readRecords ranks them):
        -- on its event filed with its run, or per producer, or kept after its event.
        of_run AS (
          UPDATE events SET duplicates = events.duplicates + times.n FROM times
          WHERE events.producer = ${duplicates.producer} AND events.run_slot = ${duplicates.slot} AND events.filed_partition = times.part
            AND events.key = times.key AND events.created_at IS NOT NULL
          RETURNING events.key),
        of_producer AS (
          UPDATE events SET duplicates = events.duplicates + times.n FROM times
          WHERE events.producer = ${duplicates.producer} AND events.run_slot = 0 AND events.filed_partition = '' AND events.key = times.key
            AND events.created_at IS NOT NULL AND times.key NOT IN (SELECT key FROM of_run)
          RETURNING events.key),
        kept AS (
          UPDATE dedupe SET duplicates = dedupe.duplicates + times.n FROM times
          WHERE dedupe.producer = ${duplicates.producer} AND dedupe.key = times.key
            AND times.key NOT IN (SELECT key FROM of_run UNION ALL SELECT key FROM of_producer)),
        attempt AS (
          UPDATE stream_seqs SET duplicates = duplicates + (SELECT count(*)::int FROM absorbed)
          WHERE producer = ${duplicates.producer} AND run_id = ${duplicates.runId} AND task = ${duplicates.task} AND attempt = ${duplicates.attempt})
        INSERT INTO asset_rollup (asset, duplicates)
        SELECT asset, count(*) FROM absorbed GROUP BY asset ORDER BY asset
        ON CONFLICT (asset) DO UPDATE SET duplicates = asset_rollup.duplicates + excluded.duplicates`.compile(db),
    ),
    saveRunOutcome: pgStatement(
      'saveRunOutcome',
      runOutcome,
      db
        .updateTable('streams')
        .set({ outcome: runOutcome.outcome, outcome_attempt: runOutcome.outcomeAttempt })
        .where((eb) => eb.and(where(runOutcome)))
        // A success is final: a late failure of an older attempt does not undo it.
        .where((eb) => eb.or([eb('outcome', 'is', null), eb('outcome', '<>', sql.lit('succeeded'))]))
        // Nor does an earlier attempt's failure undo what a later attempt said.
        .where('outcome_attempt', '<=', runOutcome.outcomeAttempt)
        .compile(),
    ),
    recordFence: pgStatement(
      'recordFence',
      fence,
      db
        .insertInto('stream_fences')
        .values({ ...where(fence), attempt: fence.attempt, fenced_by: fence.fencedBy, items: fence.items, last_at: fence.ts })
        .onConflict((oc) =>
          oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet((eb) => ({
            items: eb('stream_fences.items', '+', eb.ref('excluded.items')),
            fenced_by: eb.ref('excluded.fenced_by'),
            last_at: eb.ref('excluded.last_at'),
          })),
        )
        .compile(),
    ),
    checkpointNames: pgStatement(
      'checkpointNames',
      streamKey,
      db
        .selectFrom('stream_checkpoints')
        .select('name')
        .where((eb) => eb.and(where(streamKey)))
        .compile(),
    ),
    causeEvents: pgStatement(
      'causeEvents',
      cursors,
      db
        .selectFrom('events')
        .select(['cursor', 'event_id', 'asset', 'partition_key', 'depth', 'lineage'])
        .where('cursor', '=', sql<number>`ANY(${cursors.cursors})`)
        .compile(),
    ),
    // Delivered to the listeners when the transaction commits, and not at all when it rolls back.
    notifyStored: pgStatement('notifyStored', channel, sql<never>`SELECT pg_notify(${channel.channel}, ${channel.payload})`.compile(db)),
    raiseEpoch: pgStatement(
      'raiseEpoch',
      epoch,
      db.updateTable('streams').set({ epoch: epoch.epoch, updated_at: epoch.ts }).where((eb) => eb.and(where(epoch))).compile(),
    ),
  };
}
