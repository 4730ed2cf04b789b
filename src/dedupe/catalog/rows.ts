import { sql, type ExpressionBuilder, type RawBuilder, type Selectable } from 'kysely';
import { CONSUMER_CURSOR_CHECKPOINT, type AttemptSummary, type EventRef, type Rejection } from '../../protocol/catalog.js';
import type { RejectionCode } from '../../protocol/errors.js';
import { rejectionFix } from '../../protocol/rejection-fixes.js';
import type { EventRow } from '../tables.js';
import type { CatalogDatabase, CatalogSchema } from './database.js';

/**
 * The catalog's pieces of SQL and the shapes its rows take on the wire: which attempt fenced which, what
 * makes a stream a consumer group, the refusals in order, a refusal and an event reference as the API
 * returns them, and the scope conditions, the same on both stores.
 */

export const EVENT_REF_COLUMNS = ['cursor', 'event_id', 'ts', 'producer', 'workflow', 'run_id', 'task', 'attempt'] as const;

/** Each attempt that delivered or was fenced, with what fenced it. */
export function attemptsOf(
  epoch: number,
  seqs: readonly Selectable<CatalogSchema['stream_seqs']>[],
  fences: readonly Selectable<CatalogSchema['stream_fences']>[],
): AttemptSummary[] {
  const numbers = [...new Set([...seqs.map((row) => row.attempt), ...fences.map((row) => row.attempt)])].sort((a, b) => a - b);
  return numbers.map((attempt) => {
    const seq = seqs.find((row) => row.attempt === attempt);
    const fence = fences.find((row) => row.attempt === attempt);
    // Fenced by the next attempt that delivered after it, or, for a zombie refused, the epoch it met.
    const next = numbers.find((other) => other > attempt && seqs.some((row) => row.attempt === other));
    return {
      attempt,
      lastSeq: Number(seq?.last_seq ?? 0),
      firstAt: seq?.first_at ?? null,
      lastAt: seq?.last_at ?? null,
      duplicates: Number(seq?.duplicates ?? 0),
      fencedItems: Number(fence?.items ?? 0),
      fencedBy: attempt >= epoch ? null : (fence?.fenced_by ?? next ?? epoch),
    };
  });
}

export function isConsumer(eb: ExpressionBuilder<CatalogSchema & { s: CatalogSchema['streams'] }, 's'>) {
  return eb.exists(
    eb
      .selectFrom('stream_checkpoints as c')
      .select(sql.lit(1).as('one'))
      .whereRef('c.producer', '=', 's.producer')
      .whereRef('c.run_id', '=', 's.run_id')
      .whereRef('c.task', '=', 's.task')
      .where('c.name', '=', CONSUMER_CURSOR_CHECKPOINT),
  );
}

/** Where refusals are kept: at their positions (with every other outcome), and beside them. */
export const REFUSAL_TABLES = ['stream_outcomes', 'stream_refusals'] as const;

/** One table's refusals (rejections and conflicts), newest first: each table is read in its own order, and the two merged. */
export function refusalsIn(q: CatalogDatabase['q'], table: (typeof REFUSAL_TABLES)[number]) {
  return q
    .selectFrom(table)
    .selectAll()
    .where('status', '<>', 'checkpointed')
    .orderBy('created_at', 'desc')
    .orderBy('producer', 'desc')
    .orderBy('run_id', 'desc')
    .orderBy('task', 'desc')
    .orderBy('attempt', 'desc')
    .orderBy('seq', 'desc')
    .orderBy('key', 'desc');
}

/** A refusal's place in the list, newest first: its time, stream, attempt, position and key. */
export function refusalKey(row: Selectable<CatalogSchema['stream_outcomes']>): [number, string, string, string, number, number, string] {
  return [Number(row.created_at), row.producer, row.run_id, row.task, row.attempt, Number(row.seq), row.key];
}

/** The two tables' refusals as one list, newest first: each already in that order. */
export function mergeRefusals<Row extends Selectable<CatalogSchema['stream_outcomes']>>(lists: readonly (readonly Row[])[]): Row[] {
  const compare = (a: Row, b: Row) => {
    const [x, y] = [refusalKey(a), refusalKey(b)];
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i]! < y[i]! ? 1 : -1;
    return 0;
  };
  return lists.flat().sort(compare);
}

export function toRejection(row: Selectable<CatalogSchema['stream_outcomes']>): Rejection {
  const code = row.code as RejectionCode;
  return {
    producer: row.producer,
    runId: row.run_id,
    task: row.task === '' ? null : row.task,
    attempt: row.attempt,
    seq: Number(row.seq),
    key: row.key,
    status: row.status === 'conflict' ? 'conflict' : 'rejected',
    code,
    detail: row.detail,
    field: row.field,
    asset: row.asset,
    partitionKey: row.partition_key,
    at: new Date(Number(row.created_at)).toISOString(),
    fix: rejectionFix(code, row.asset),
  };
}

export function toEventRef(row: Pick<EventRow, (typeof EVENT_REF_COLUMNS)[number]> | { cursor: number | null }): EventRef {
  const event = row as Pick<EventRow, (typeof EVENT_REF_COLUMNS)[number]>;
  return {
    cursor: Number(event.cursor),
    eventId: event.event_id,
    timestamp: event.ts,
    producer: event.producer,
    workflow: event.workflow,
    runId: event.run_id,
    task: event.task,
    attempt: event.attempt,
  };
}

/** `column` starts with `prefix`, the same way on both stores (LIKE folds case on SQLite). */
export function startsWith(column: string, prefix: string): RawBuilder<boolean> {
  return sql<boolean>`substr(${sql.ref(column)}, 1, ${prefix.length}) = ${prefix}`;
}

/** A token's producers pattern, as a condition on `column`. */
export function producerScope(column: string, pattern: string): RawBuilder<boolean> {
  if (pattern === '*') return sql<boolean>`1 = 1`;
  if (pattern.endsWith('*')) return startsWith(column, pattern.slice(0, -1));
  return sql<boolean>`${sql.ref(column)} = ${pattern}`;
}
