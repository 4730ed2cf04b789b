import type Database from 'better-sqlite3';
import { Kysely, SqliteDialect, sql, type Compilable, type RawBuilder } from 'kysely';
import { OnceboxError } from '../protocol/errors.js';

/**
 * kysely builds the SQL; better-sqlite3 runs it. Hot paths run inside synchronous transactions, where
 * kysely's async executor cannot go, so each query is compiled once into a statement with named
 * parameters (`@name`) and prepared once.
 * @internal
 */
export function queryBuilder<Schema>(db: Database.Database): Kysely<Schema> {
  return new Kysely<Schema>({ dialect: new SqliteDialect({ database: db }) });
}

declare const paramsType: unique symbol;

/**
 * @internal The named parameters of a statement, typed: `p.key` stands for `@key` in the SQL, and the
 * statement then takes exactly `P` when it runs. A column and its parameter of different types, or a
 * parameter renamed on one side only, fail to compile.
 */
export type Params<P> = { readonly [K in keyof P & string]-?: RawBuilder<P[K]> } & { readonly [paramsType]?: P };

/** @internal */
export function params<P extends object>(): Params<P> {
  return new Proxy({}, { get: (_target, name) => sql.raw(`@${String(name)}`) }) as Params<P>;
}

/** @internal A prepared statement whose parameters are bound by name. */
export interface Prepared<P, Row> {
  run(params: P): Database.RunResult;
  get(params: P): Row | undefined;
  all(params: P): Row[];
}

/** @internal A statement with no parameters. */
export interface PreparedConstant<Row> {
  run(): Database.RunResult;
  get(): Row | undefined;
  all(): Row[];
}

/** @internal The SQL of a statement meant to bind by name, refused if kysely made any value positional. */
export function namedSql(query: Compilable): string {
  const compiled = query.compile();
  if (compiled.parameters.length > 0) {
    throw new OnceboxError('internal', `a prepared statement must bind every value by name; found positional parameters in ${compiled.sql}`);
  }
  return compiled.sql;
}

/** @internal Prepares a query whose values are all `params` (the row type comes from the query). */
export function prepare<P, Row>(db: Database.Database, _params: Params<P>, query: Compilable<Row>): Prepared<P, Row> {
  return db.prepare(namedSql(query)) as unknown as Prepared<P, Row>;
}

/** @internal Prepares a query with no parameters. */
export function prepareConstant<Row>(db: Database.Database, query: Compilable<Row>): PreparedConstant<Row> {
  return db.prepare(namedSql(query)) as unknown as PreparedConstant<Row>;
}
