import type Database from 'better-sqlite3';
import type { Compilable } from 'kysely';
import { queryBuilder } from '../../sqlite/statements.js';
import { runStepsSync, type CatalogDatabase, type CatalogSchema, type CatalogSteps } from './database.js';
import { SqliteReader } from './sqlite-reader.js';

/** Statements kept prepared, by their SQL; a list's IN (…) of another length is another statement. */
const MAX_PREPARED = 256;

/**
 * The catalog on the embedded store: better-sqlite3 runs what kysely builds. Reads go to a worker thread
 * with a connection of its own (SqliteReader), so that no catalog read holds the server's event loop; a
 * write's steps run in one IMMEDIATE transaction on the server's connection. A store in memory has no file
 * another connection could open: its reads run on the server's connection.
 */
export class SqliteCatalogDatabase implements CatalogDatabase {
  readonly dialect = 'sqlite';
  readonly q;
  private readonly prepared = new Map<string, Database.Statement>();
  private readonly reader: SqliteReader | undefined;

  constructor(private readonly db: Database.Database) {
    this.q = queryBuilder<CatalogSchema>(db);
    this.reader = db.memory ? undefined : new SqliteReader(db.name);
  }

  async all<Row>(query: Compilable<Row>): Promise<Row[]> {
    const compiled = query.compile();
    if (this.reader !== undefined && this.statement(compiled.sql).reader) return (await this.reader.all(compiled.sql, compiled.parameters)) as Row[];
    return this.run(query) as Row[];
  }

  /** Stops the reader: the store is closing. */
  close(): Promise<void> {
    return this.reader?.close() ?? Promise.resolve();
  }

  /**
   * A catalog write: counts derived from the events, which a crash that lost them has counted again from
   * the last position kept. So it costs no fsync of its own (the next ingest's fsync of the WAL takes it
   * along): with many catalog readers, a rollup per read would otherwise add a sync per read to every
   * publisher's wait.
   */
  async transaction<Result>(steps: () => CatalogSteps<Result>): Promise<Result> {
    const synchronous = this.db.pragma('synchronous', { simple: true }) as number;
    this.db.pragma('synchronous = OFF');
    try {
      return this.db.transaction(() => this.runSync(steps())).immediate();
    } finally {
      this.db.pragma(`synchronous = ${synchronous}`);
    }
  }

  /** Runs a write's steps at once, inside a transaction the caller holds. */
  runSync<Result>(steps: CatalogSteps<Result>): Result {
    return runStepsSync(steps, (query) => this.run(query));
  }

  private run(query: Compilable<unknown>): unknown[] {
    const { sql, parameters } = query.compile();
    const statement = this.statement(sql);
    if (statement.reader) return statement.all(...parameters);
    statement.run(...parameters);
    return [];
  }

  /** The statement of `sql` on the server's connection, prepared once: it also tells a read from a write. */
  private statement(sql: string): Database.Statement {
    let statement = this.prepared.get(sql);
    if (statement === undefined) {
      if (this.prepared.size >= MAX_PREPARED) this.prepared.clear();
      statement = this.db.prepare(sql);
      this.prepared.set(sql, statement);
    }
    return statement;
  }
}
