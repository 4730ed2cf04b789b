import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { RecordedStatus } from '../ingest/resolve.js';
import type { EventRow, OfAttempt, OfStream, SharedTables } from '../tables.js';
import { pgParams, pgStatement } from './connection.js';

export interface PgSchema extends SharedTables {
  /** `id` is the insertion order; `cursor` is given after commit by the sequencer. */
  events: Omit<EventRow, 'cursor'> & { id: number; cursor: number | null };
  event_cursor: { id: number; last: number };
}

const STREAM_TYPES = { producer: 'text', runId: 'text', task: 'text' } as const;
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
  const records = pgParams<{ producer: string; keys: string[] }>({ producer: 'text', keys: 'uuid[]' });
  const claim = pgParams<{ producer: string; keys: string[]; fingerprints: string[]; eventIds: string[]; ts: string; createdAt: number }>({
    producer: 'text',
    keys: 'uuid[]',
    fingerprints: 'text[]',
    eventIds: 'uuid[]',
    ts: 'text',
    createdAt: 'bigint',
  });
  const events = pgParams<{
    eventIds: string[];
    keys: string[];
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
    OfAttempt & { seqs: number[]; keys: string[]; statuses: RecordedStatus[]; codes: string[]; details: string[]; fields: (string | null)[]; createdAt: number }
  >({ ...ATTEMPT_TYPES, seqs: 'bigint[]', keys: 'text[]', statuses: 'text[]', codes: 'text[]', details: 'text[]', fields: 'text[]', createdAt: 'bigint' });
  const checkpoint = pgParams<OfAttempt & { name: string; value: string; seq: number; revision: number; ts: string }>({
    ...ATTEMPT_TYPES,
    name: 'text',
    value: 'text',
    seq: 'bigint',
    revision: 'integer',
    ts: 'text',
  });
  const lastSeq = pgParams<OfAttempt & { lastSeq: number }>({ ...ATTEMPT_TYPES, lastSeq: 'bigint' });
  const epoch = pgParams<OfStream & { epoch: number; ts: string }>({ ...STREAM_TYPES, epoch: 'integer', ts: 'text' });
  const channel = pgParams<{ channel: string; payload: string }>({ channel: 'text', payload: 'text' });
  const cursors = pgParams<{ cursors: number[] }>({ cursors: 'bigint[]' });

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
    readRecords: pgStatement(
      'readRecords',
      records,
      db
        .selectFrom('dedupe')
        .select(['key', 'fingerprint', 'event_id', 'ts'])
        .where('producer', '=', records.producer)
        .where('key', '=', sql<string>`ANY(${records.keys})`)
        .compile(),
    ),
    // Insert first, for every new key at once; the keys that come back were this request's.
    claimKeys: pgStatement(
      'claimKeys',
      claim,
      sql<{ key: string }>`
        INSERT INTO dedupe (producer, key, fingerprint, event_id, ts, created_at)
        SELECT ${claim.producer}, d.key, d.fingerprint, d.event_id, ${claim.ts}, ${claim.createdAt}
        FROM unnest(${claim.keys}, ${claim.fingerprints}, ${claim.eventIds}) AS d(key, fingerprint, event_id)
        ON CONFLICT (producer, key) DO NOTHING
        RETURNING key`.compile(db),
    ),
    insertEvents: pgStatement(
      'insertEvents',
      events,
      sql`
        INSERT INTO events (event_id, key, asset, partition_key, partition_date, extra, seq, trace_context, caused_by, depth, lineage,
                            ts, producer, workflow, run_id, task, attempt)
        SELECT e.*, ${events.ts}, ${events.producer}, ${events.workflow}, ${events.runId}, ${events.task}, ${events.attempt}
        FROM unnest(${events.eventIds}, ${events.keys}, ${events.assets}, ${events.partitionKeys}, ${events.partitionDates},
                    ${events.extras}, ${events.seqs}, ${events.traceContexts}, ${events.causedBy}, ${events.depths}, ${events.lineages}) AS e`.compile(db),
    ),
    recordOutcomes: pgStatement(
      'recordOutcomes',
      outcomes,
      sql`
        INSERT INTO stream_outcomes (producer, run_id, task, attempt, seq, key, status, code, detail, field, created_at)
        SELECT ${outcomes.producer}, ${outcomes.runId}, ${outcomes.task}, ${outcomes.attempt}, o.*, ${outcomes.createdAt}
        FROM unnest(${outcomes.seqs}, ${outcomes.keys}, ${outcomes.statuses}, ${outcomes.codes}, ${outcomes.details}, ${outcomes.fields}) AS o
        ON CONFLICT DO NOTHING`.compile(db),
    ),
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
            .columns(['producer', 'run_id', 'task', 'name'])
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
        .values({ ...where(lastSeq), attempt: lastSeq.attempt, last_seq: lastSeq.lastSeq })
        .onConflict((oc) => oc.columns(['producer', 'run_id', 'task', 'attempt']).doUpdateSet({ last_seq: lastSeq.lastSeq }))
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
