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

/** Each attempt that delivered or was fenced, with what fenced it: in one pass, however many there are. */
export function attemptsOf(
  epoch: number,
  seqs: readonly Selectable<CatalogSchema['stream_seqs']>[],
  fences: readonly Selectable<CatalogSchema['stream_fences']>[],
): AttemptSummary[] {
  const seqOf = new Map(seqs.map((row) => [row.attempt, row]));
  const fenceOf = new Map(fences.map((row) => [row.attempt, row]));
  const numbers = [...new Set([...seqOf.keys(), ...fenceOf.keys()])].sort((a, b) => a - b);
  // Fenced by the next attempt that delivered after it, or, for a zombie refused, the epoch it met:
  // found from the newest down, each attempt seeing the nearest delivering one above it.
  const nextDelivered = new Map<number, number | undefined>();
  let above: number | undefined;
  for (const attempt of [...numbers].reverse()) {
    nextDelivered.set(attempt, above);
    if (seqOf.has(attempt)) above = attempt;
  }
  return numbers.map((attempt) => {
    const seq = seqOf.get(attempt);
    const fence = fenceOf.get(attempt);
    return {
      attempt,
      lastSeq: Number(seq?.last_seq ?? 0),
      firstAt: seq?.first_at ?? null,
      lastAt: seq?.last_at ?? null,
      duplicates: Number(seq?.duplicates ?? 0),
      fencedItems: Number(fence?.items ?? 0),
      fencedBy: attempt >= epoch ? null : (fence?.fenced_by ?? nextDelivered.get(attempt) ?? epoch),
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
type RefusalTable = (typeof REFUSAL_TABLES)[number];
type RefusalQuery = ReturnType<typeof refusalsIn>;
/** The conditions a list puts on each table's refusals. */
export type RefusalFilter = (select: RefusalQuery) => RefusalQuery;

/** A refusal's columns, named in one order: the two tables have them in another (stream_outcomes grew them over time). */
const REFUSAL_COLUMNS = ['producer', 'run_id', 'task', 'attempt', 'seq', 'key', 'status', 'code', 'detail', 'field', 'asset', 'partition_key', 'created_at'] as const;

/** One table's refusals (rejections and conflicts), newest first. */
function refusalsIn(q: CatalogDatabase['q'], table: RefusalTable) {
  const ordered = ['created_at', 'producer', 'run_id', 'task', 'attempt', 'seq', 'key', 'code'] as const;
  return ordered.reduce((select, column) => select.orderBy(column, 'desc'), q.selectFrom(table).select(REFUSAL_COLUMNS).where('status', '<>', 'checkpointed'));
}

/**
 * Both tables' refusals as one list, newest first, `filter` applied to each: each table read in its own
 * order up to `limit` rows, and the two merged by the database in the same order (and collation) a
 * page's `after` is compared in, so that a page goes on exactly where the one before it ended.
 */
export function refusals(q: CatalogDatabase['q'], filter: RefusalFilter, limit: number) {
  const branch = (table: RefusalTable) => filter(refusalsIn(q, table)).limit(limit);
  const merged = q
    .selectFrom((eb) =>
      eb.selectFrom(branch('stream_outcomes').as('outcomes')).select(REFUSAL_COLUMNS).unionAll(eb.selectFrom(branch('stream_refusals').as('beside')).select(REFUSAL_COLUMNS)).as('r'),
    )
    .select(REFUSAL_COLUMNS);
  const ordered = ['created_at', 'producer', 'run_id', 'task', 'attempt', 'seq', 'key', 'code'] as const;
  return ordered.reduce((select, column) => select.orderBy(column, 'desc'), merged).limit(limit);
}

/** A refusal's place in the list, newest first: its time, stream, attempt, position, key and code. */
export function refusalKey(row: Selectable<CatalogSchema['stream_outcomes']>): [number, string, string, string, number, number, string, string] {
  return [Number(row.created_at), row.producer, row.run_id, row.task, row.attempt, Number(row.seq), row.key, row.code];
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
