import { sql, type CompiledQuery, type RawBuilder } from 'kysely';
import type pg from 'pg';

/**
 * kysely builds the SQL; pg runs it as a named prepared statement. The ingest path runs the same few
 * statements for every request, so each is compiled once, when the store opens, and PostgreSQL parses
 * and plans it once per connection instead of once per request.
 * @internal
 */
export interface PgStatement<Row> {
  readonly name: string;
  readonly text: string;
  /** Only carries the row type. */
  readonly rows?: Row;
}

/**
 * @internal A positional parameter with its type (`$1::text[]`), bound when the statement runs. The
 * type is spelled out because a prepared statement is planned before it sees any value.
 */
export function pgParam<T = any>(position: number, type: string): RawBuilder<T> {
  return sql.raw<T>(`$${position}::${type}`);
}

/** @internal A statement not named yet: `nameStatements` names it after the key it is stored under. */
export type UnnamedStatement<Row> = Omit<PgStatement<Row>, 'name'>;

/** @internal */
export function pgStatement<Row = never>(query: CompiledQuery): UnnamedStatement<Row> {
  if (query.parameters.length > 0) {
    throw new Error(`pgStatement: use pgParam() for every value; found inline parameters in ${query.sql}`);
  }
  return { text: query.sql };
}

/**
 * @internal Names each statement after its key (`oncebox_lockStream`): one name per statement text on
 * a connection, with no name to keep in step by hand.
 */
export function nameStatements<T extends Record<string, UnnamedStatement<unknown>>>(statements: T): { [K in keyof T]: T[K] & { readonly name: string } } {
  return Object.fromEntries(Object.entries(statements).map(([key, statement]) => [key, { ...statement, name: `oncebox_${key}` }])) as {
    [K in keyof T]: T[K] & { readonly name: string };
  };
}

/** @internal Runs a prepared statement on one connection (inside the caller's transaction). */
export async function runStatement<Row>(client: pg.ClientBase, statement: PgStatement<Row>, values: readonly unknown[]): Promise<Row[]> {
  const result = await client.query({ name: statement.name, text: statement.text, values: values as unknown[] });
  return result.rows as Row[];
}

/**
 * @internal Runs `work` in one transaction on one pooled connection. A connection whose ROLLBACK fails
 * is discarded rather than handed to the next request in an unknown state.
 */
export async function inTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: Error) => {
      broken = rollbackError;
    });
    throw error;
  } finally {
    client.release(broken);
  }
}
