import { sql, type CompiledQuery, type RawBuilder } from 'kysely';
import pg from 'pg';
import pRetry from 'p-retry';
import { InternalError, OnceboxError } from '../../protocol/errors.js';

/**
 * kysely builds the SQL; pg runs it as a named prepared statement. The ingest path runs the same few
 * statements for every request, so each is compiled once, when the store opens, and PostgreSQL parses
 * and plans it once per connection instead of once per request.
 * @internal
 */
export interface PgStatement<P, Row> {
  readonly name: string;
  readonly text: string;
  /** The positional values, in `$1…$n` order, of one run's named parameters. */
  readonly values: (params: P) => unknown[];
  /** Only carries the row type. */
  readonly rows?: Row;
}

declare const paramsType: unique symbol;

/**
 * @internal The named parameters of a statement with their PostgreSQL types (`{ keys: 'uuid[]' }`):
 * `p.keys` stands for `$1::uuid[]` in the SQL, and the statement then takes exactly `P` when it runs.
 * The type is spelled out because a prepared statement is planned before it sees any value.
 */
export type PgParams<P> = { readonly [K in keyof P & string]-?: RawBuilder<P[K]> } & { readonly [paramsType]?: P };

const ORDER = Symbol('order');

/** @internal */
export function pgParams<P extends object>(types: { readonly [K in keyof P & string]-?: string }): PgParams<P> {
  const names = Object.keys(types) as (keyof P & string)[];
  const refs = Object.fromEntries(names.map((name, i) => [name, sql.raw(`$${i + 1}::${types[name]}`)]));
  return Object.assign(refs, { [ORDER]: names }) as unknown as PgParams<P>;
}

/** @internal Names a compiled query and binds its parameters by name (`oncebox_lockStream`). */
export function pgStatement<P, Row>(name: string, params: PgParams<P>, query: CompiledQuery<Row>): PgStatement<P, Row> {
  if (query.parameters.length > 0) {
    throw new InternalError(`statement ${name}: bind every value with pgParams; found inline parameters in ${query.sql}`);
  }
  const names = (params as unknown as { [ORDER]: (keyof P)[] })[ORDER];
  return { name: `oncebox_${name}`, text: query.sql, values: (values: P) => names.map((key) => values[key]) };
}

/** @internal Runs a prepared statement on one connection (inside the caller's transaction). */
export async function runStatement<P, Row>(client: pg.ClientBase, statement: PgStatement<P, Row>, params: P): Promise<Row[]> {
  const result = await client.query({ name: statement.name, text: statement.text, values: statement.values(params) });
  return result.rows as Row[];
}

// bigint columns come back as strings by default; every one of ours fits a double.
const INT8 = 20;

/**
 * @internal A pool whose connections read bigint as a number. The parser goes on the pool's config, not
 * on `pg.types`, so no other user of `pg` in the process sees its settings change.
 */
export function createPool(config: pg.PoolConfig): pg.Pool {
  const types = {
    getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
      oid === INT8 && format !== 'binary' ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format as 'text')) as pg.CustomTypesConfig['getTypeParser'],
  };
  return new pg.Pool({ ...config, types });
}

/** The server cannot start on its PostgreSQL database: not reached, or the login refused. */
export class DatabaseUnreachableError extends OnceboxError {
  constructor(message: string, cause: unknown) {
    super('database_unreachable', message, { cause });
  }
}

/** What each failure to connect says to do; the causes that are not about connecting have no entry. */
const CONNECT_FIXES: Record<string, string> = {
  ECONNREFUSED: 'nothing listens there: start PostgreSQL, or correct the host and port',
  ENOTFOUND: 'no such host: correct the host name',
  EAI_AGAIN: 'the host name could not be looked up: check the name and DNS',
  ETIMEDOUT: 'no answer: check the host, the port and any firewall between',
  EHOSTUNREACH: 'the host cannot be reached: check the address and the network',
  '28P01': 'the password was refused: correct the user and password',
  '28000': 'the login was refused (no such user, or pg_hba.conf does not allow it): correct the user, or allow this client',
  '3D000': 'the database does not exist: create it, or correct its name',
};

/**
 * @internal A failure to reach or log in to PostgreSQL, said with where it tried (never the password)
 * and what to do; any other error as it is.
 */
export function connectFailure(connectionString: string, error: unknown): unknown {
  const code = (error as { code?: unknown } | undefined)?.code;
  const fix = typeof code === 'string' ? CONNECT_FIXES[code] : undefined;
  if (fix === undefined) return error;
  let where = 'PostgreSQL';
  try {
    const url = new URL(connectionString);
    where = `PostgreSQL at ${url.hostname || 'localhost'}:${url.port || 5432}${url.pathname.length > 1 ? `, database ${decodeURIComponent(url.pathname.slice(1))}` : ''}${url.username ? `, user ${decodeURIComponent(url.username)}` : ''}`;
  } catch {
    // A connection string pg took but URL does not: said without its details.
  }
  return new DatabaseUnreachableError(`cannot use ${where} (${code}: ${(error as Error).message}): ${fix}`, error);
}

/**
 * @internal Runs `work` in one transaction on one pooled connection. A connection whose ROLLBACK fails
 * is discarded rather than handed to the next request in an unknown state.
 */
export async function inTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  // A deadlock or a serialization failure rolls the whole transaction back, having changed nothing: it
  // is run again from the start (a few times, after a short random pause) rather than answered as a 500.
  return pRetry(() => inOneTransaction(pool, work), {
    retries: TRANSIENT_RETRIES,
    minTimeout: 5,
    maxTimeout: 50,
    randomize: true,
    shouldRetry: ({ error }) => isTransient(error),
  });
}

/** SQLSTATEs of a transaction that PostgreSQL rolled back for its timing alone: deadlock_detected, serialization_failure. */
const TRANSIENT_CODES = new Set(['40P01', '40001']);

/** @internal Whether PostgreSQL refused a statement for its timing alone (the whole transaction is to run again). */
export function isTransient(error: unknown): boolean {
  return TRANSIENT_CODES.has((error as { code?: unknown } | null)?.code as string);
}
const TRANSIENT_RETRIES = 4;

async function inOneTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
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
