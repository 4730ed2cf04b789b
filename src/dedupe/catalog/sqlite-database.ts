import type Database from 'better-sqlite3';
import type { Compilable } from 'kysely';
import { queryBuilder } from '../../sqlite/statements.js';
import { runStepsSync, type CatalogDatabase, type CatalogSchema, type CatalogSteps } from './database.js';

/** Statements kept prepared, by their SQL; a list's IN (…) of another length is another statement. */
const MAX_PREPARED = 256;

/** The catalog on the embedded store: better-sqlite3 runs what kysely builds, a write's steps in one IMMEDIATE transaction. */
export class SqliteCatalogDatabase implements CatalogDatabase {
  readonly dialect = 'sqlite';
  readonly q;
  private readonly prepared = new Map<string, Database.Statement>();

  constructor(private readonly db: Database.Database) {
    this.q = queryBuilder<CatalogSchema>(db);
  }

  async all<Row>(query: Compilable<Row>): Promise<Row[]> {
    return this.run(query) as Row[];
  }

  async transaction<Result>(steps: () => CatalogSteps<Result>): Promise<Result> {
    return this.db.transaction(() => this.runSync(steps())).immediate();
  }

  /** Runs a write's steps at once, inside a transaction the caller holds. */
  runSync<Result>(steps: CatalogSteps<Result>): Result {
    return runStepsSync(steps, (query) => this.run(query));
  }


  private run(query: Compilable<unknown>): unknown[] {
    const { sql, parameters } = query.compile();
    let statement = this.prepared.get(sql);
    if (statement === undefined) {
      if (this.prepared.size >= MAX_PREPARED) this.prepared.clear();
      statement = this.db.prepare(sql);
      this.prepared.set(sql, statement);
    }
    if (statement.reader) return statement.all(...parameters);
    statement.run(...parameters);
    return [];
  }
}
