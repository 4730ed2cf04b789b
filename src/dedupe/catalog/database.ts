import type { Compilable, Kysely } from 'kysely';
import { OnceboxError, ProblemCode } from '../../protocol/errors.js';
import type { EventRow, SharedTables } from '../tables.js';

/** The tables the catalog reads, as both stores have them. */
export interface CatalogSchema extends SharedTables {
  events: EventRow;
}

/** A catalog write: its statements, run in one transaction; each yields a query and gets its rows back. */
export type CatalogSteps<Result> = Generator<Compilable<unknown>, Result, unknown[]>;

/**
 * How the catalog reaches a store: one kysely builder for both dialects, and each store's way of running
 * what it builds. Reads run one statement at a time; a write's steps run in one transaction, synchronously
 * on SQLite (where kysely's async transactions would let an ingest interleave on the one connection).
 */
export interface CatalogDatabase {
  readonly dialect: 'sqlite' | 'postgres';
  readonly q: Kysely<CatalogSchema>;
  all<Row>(query: Compilable<Row>): Promise<Row[]>;
  transaction<Result>(steps: () => CatalogSteps<Result>): Promise<Result>;
}

/** Runs a write's steps against a synchronous executor (SQLite, inside its transaction). */
export function runStepsSync<Result>(steps: CatalogSteps<Result>, run: (query: Compilable<unknown>) => unknown[]): Result {
  let next = steps.next();
  while (!next.done) next = steps.next(run(next.value));
  return next.value;
}

/** Runs a write's steps one round trip each (PostgreSQL, on the transaction's connection). */
export async function runSteps<Result>(steps: CatalogSteps<Result>, run: (query: Compilable<unknown>) => Promise<unknown[]>): Promise<Result> {
  let next = steps.next();
  while (!next.done) next = steps.next(await run(next.value));
  return next.value;
}

/** Longest one catalog read may run before it is stopped and the reader told to come back. */
export const CATALOG_READ_TIMEOUT_MS = 10_000;

/**
 * A catalog read ran past its time and was stopped: the catalog is busy (many readers of its costliest
 * lists at once). The reader is answered 503 with Retry-After; nothing a publisher does waits for it.
 */
export class CatalogBusyError extends OnceboxError {
  constructor(message = `a catalog read ran past ${CATALOG_READ_TIMEOUT_MS / 1000} s and was stopped: the catalog is busy; retry it in a moment`) {
    super(ProblemCode.Overloaded, message);
  }
}
