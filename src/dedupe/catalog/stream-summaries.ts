import { sql, type ExpressionBuilder } from 'kysely';
import type { StreamSummary } from '../../protocol/catalog.js';
import type { StoredRunOutcome } from '../tables.js';
import type { CatalogDatabase, CatalogSchema } from './database.js';
import { attemptsOf } from './rows.js';

/** A stream's key columns, as its tables have them. */
export type StreamKey = { producer: string; run_id: string; task: string };
/** A row of the streams table as a list reads it. */
export type StreamRow = StreamKey & { epoch: number; updated_at: string; outcome: StoredRunOutcome | null; consumer: unknown };

/** The attempts a stream's summary lists: the latest this many numbers up to its epoch. */
const ATTEMPTS_LISTED = 100;

/**
 * Each stream's summary; with `preview`, a checkpoint value longer than that many characters of JSON is
 * read only so far (the rest never leaves the database) and shown cut, named in `cutCheckpoints`.
 */
export async function streamSummaries(db: CatalogDatabase, rows: readonly StreamRow[], staleBefore: string, preview?: number): Promise<StreamSummary[]> {
  if (rows.length === 0) return [];
  const { q } = db;
  const ofStreams = (eb: ExpressionBuilder<CatalogSchema, 'stream_seqs' | 'stream_fences' | 'stream_checkpoints'>) =>
    eb.or(rows.map((row) => eb.and([eb('producer', '=', row.producer), eb('run_id', '=', row.run_id), eb('task', '=', row.task)])));
  // The attempts listed are the latest ATTEMPTS_LISTED numbers up to the epoch: a run whose attempts
  // jumped by thousands lists what a person reads, and the page stays bounded.
  const recentOf = (eb: ExpressionBuilder<CatalogSchema, 'stream_seqs' | 'stream_fences'>) =>
    eb.or(rows.map((row) => eb.and([eb('producer', '=', row.producer), eb('run_id', '=', row.run_id), eb('task', '=', row.task), eb('attempt', '>', row.epoch - ATTEMPTS_LISTED)])));
  const totals = (table: 'stream_seqs' | 'stream_fences') =>
    db.all(
      q
        .selectFrom(table)
        .select(['producer', 'run_id', 'task', (eb) => eb.fn.min('attempt').as('first')])
        .select(table === 'stream_seqs' ? sql<number>`sum(duplicates)`.as('duplicates') : sql<number>`0`.as('duplicates'))
        .where(ofStreams)
        .groupBy(['producer', 'run_id', 'task']),
    );
  const [seqs, fences, checkpoints, seqTotals, fenceTotals] = await Promise.all([
    db.all(q.selectFrom('stream_seqs').selectAll().where(recentOf).orderBy('attempt')),
    db.all(q.selectFrom('stream_fences').selectAll().where(recentOf).orderBy('attempt')),
    db.all(
      q
        .selectFrom('stream_checkpoints')
        .select(['producer', 'run_id', 'task', 'name'])
        .select(preview === undefined ? sql<string>`value`.as('value') : sql<string>`substr(value, 1, ${preview + 1})`.as('value'))
        .where(ofStreams)
        .orderBy('name'),
    ),
    totals('stream_seqs'),
    totals('stream_fences'),
  ]);
  const of = (row: StreamKey) => JSON.stringify([row.producer, row.run_id, row.task]);
  const group = <Row extends StreamKey>(list: readonly Row[]) => {
    const grouped = new Map<string, Row[]>();
    for (const row of list) {
      const rows = grouped.get(of(row));
      if (rows) rows.push(row);
      else grouped.set(of(row), [row]);
    }
    return grouped;
  };
  // Both databases count characters (code points), not UTF-16 units.
  const isCut = (value: string) => preview !== undefined && value.length > preview && [...value].length > preview;
  const seqsOf = group(seqs);
  const fencesOf = group(fences);
  const checkpointsOf = group(checkpoints);
  const seqTotalOf = new Map(seqTotals.map((total) => [of(total), total]));
  const fenceTotalOf = new Map(fenceTotals.map((total) => [of(total), total]));
  return rows.map((row): StreamSummary => {
    const consumer = Boolean(Number(row.consumer)) || row.consumer === true;
    const attempts = attemptsOf(row.epoch, seqsOf.get(of(row)) ?? [], fencesOf.get(of(row)) ?? []);
    const first = Math.min(Number(seqTotalOf.get(of(row))?.first ?? Infinity), Number(fenceTotalOf.get(of(row))?.first ?? Infinity));
    return {
      producer: row.producer,
      runId: row.run_id,
      task: row.task === '' ? null : row.task,
      kind: consumer ? 'consumer' : 'run',
      epoch: row.epoch,
      lastSeq: attempts.find((attempt) => attempt.attempt === row.epoch)?.lastSeq ?? 0,
      attempts,
      attemptsCut: first <= row.epoch - ATTEMPTS_LISTED,
      fencedAttempts: attempts.filter((attempt) => attempt.attempt < row.epoch).map((attempt) => attempt.attempt),
      duplicates: Number(seqTotalOf.get(of(row))?.duplicates ?? 0),
      // Built from entries, not by assignment: a checkpoint named __proto__ is an entry like any other.
      checkpoints: Object.fromEntries(
        (checkpointsOf.get(of(row)) ?? []).map((checkpoint) => [checkpoint.name, isCut(checkpoint.value) ? `${[...checkpoint.value].slice(0, preview).join('')}…` : JSON.parse(checkpoint.value)]),
      ),
      cutCheckpoints: (checkpointsOf.get(of(row)) ?? []).filter((checkpoint) => isCut(checkpoint.value)).map((checkpoint) => checkpoint.name),
      outcome: row.outcome === 'succeeded' || row.outcome === 'failed' ? row.outcome : !consumer && row.updated_at < staleBefore ? 'stale' : 'running',
      willRetry: row.outcome === 'retrying',
      lastDeliveryAt: row.updated_at,
    };
  });
}
