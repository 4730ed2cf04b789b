import type Database from 'better-sqlite3';
import { Kysely, SqliteDialect, sql, type Compilable, type RawBuilder } from 'kysely';

/**
 * kysely builds the SQL; better-sqlite3 runs it. Hot paths run inside synchronous transactions, where
 * kysely's async executor cannot go, so each query is compiled once into a statement with named
 * parameters (`@name`) and prepared once.
 * @internal
 */
export function queryBuilder<Schema>(db: Database.Database): Kysely<Schema> {
  return new Kysely<Schema>({ dialect: new SqliteDialect({ database: db }) });
}

/** @internal A named parameter, bound by name when the prepared statement runs. */
export function param<T = any>(name: string): RawBuilder<T> {
  return sql.raw<T>(`@${name}`);
}

/** @internal A prepared statement whose parameters are bound by name. */
export interface Prepared<Result> {
  run(params?: Record<string, unknown>): Database.RunResult;
  get(params?: Record<string, unknown>): Result | undefined;
  all(params?: Record<string, unknown>): Result[];
}

/** @internal */
export function prepare<Result = unknown>(db: Database.Database, query: Compilable): Prepared<Result> {
  const compiled = query.compile();
  if (compiled.parameters.length > 0) {
    throw new Error(`prepare: use param() for every value; found positional parameters in ${compiled.sql}`);
  }
  return db.prepare(compiled.sql) as unknown as Prepared<Result>;
}
