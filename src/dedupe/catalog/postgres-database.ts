import type { Compilable, Kysely } from 'kysely';
import type pg from 'pg';
import { inTransaction } from '../postgres/connection.js';
import { CatalogBusyError, runSteps, type CatalogDatabase, type CatalogSchema, type CatalogSteps } from './database.js';

/** The catalog on PostgreSQL: reads on the pool, a write's steps in one transaction on one connection. */
export class PostgresCatalogDatabase implements CatalogDatabase {
  readonly dialect = 'postgres';

  constructor(
    private readonly pool: pg.Pool,
    readonly q: Kysely<CatalogSchema>,
  ) {}

  async all<Row>(query: Compilable<Row>): Promise<Row[]> {
    const { sql, parameters } = query.compile();
    try {
      return (await this.pool.query(sql, [...parameters])).rows as Row[];
    } catch (error) {
      // query_canceled: the pool's statement_timeout stopped it.
      if ((error as { code?: string }).code === '57014') throw new CatalogBusyError();
      throw error;
    }
  }

  /** A catalog write: derived counts, which a crash that lost them counts again, so committed without waiting for the WAL's flush. */
  transaction<Result>(steps: () => CatalogSteps<Result>): Promise<Result> {
    return inTransaction(this.pool, async (client) => {
      await client.query('SET LOCAL synchronous_commit = off');
      return this.runOn(client, steps());
    });
  }

  /** Runs a write's steps on a connection inside the caller's transaction. */
  runOn<Result>(client: pg.ClientBase, steps: CatalogSteps<Result>): Promise<Result> {
    return runSteps(steps, async (query) => {
      const { sql, parameters } = query.compile();
      return (await client.query(sql, [...parameters])).rows as unknown[];
    });
  }
}
