import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import { OutboxFileError, SchemaTooNewError, WrongOutboxFileError } from '../../protocol/errors.js';
import { migrateSqlite } from '../../sqlite/migrate.js';
import { openSqlite, type Durability } from '../../sqlite/open.js';
import { FileMeta } from './meta.js';
import { checkpointStatements, type CheckpointStatements } from './checkpoints.js';
import { terminalStatements, type TerminalStatements } from './terminal-statements.js';
import { outboxMigrations } from './migrations.js';
import { rowStatements, type RowStatements } from './rows.js';
import { RunAttempts } from './run-attempts.js';


/**
 * A tool pointed at the server's database, or at another SQLite file, says so, instead of reporting a
 * schema "newer than this oncebox" or migrating a stranger's file into an outbox.
 */
function refuseOtherDatabases(db: Database.Database): void {
  const tables = new Set((db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((row) => row.name));
  if (tables.has('outbox')) return;
  db.close();
  const what =
    tables.size === 0
      ? 'empty: no job has opened it as an outbox'
      : tables.has('dedupe') && tables.has('events')
        ? "an oncebox server database, not a producer's outbox file"
        : 'a SQLite database, but not an oncebox outbox file';
  throw Object.assign(new Error(`it is ${what}`), { code: 'NOT_AN_OUTBOX' });
}

/**
 * One open outbox file: the connection, migrated to this oncebox's schema, and the statements of its
 * tables, each set prepared once by the module of its concept (rows, checkpoints, meta, runs,
 * lifecycle). Both the job (`openOutbox`) and a relay process (`oncebox relay`) open it this way.
 * @internal
 */
/** Rows waiting to be delivered: emissions (events not yet on the server) and checkpoint updates. */
export interface PendingRows {
  events: number;
  checkpoints: number;
}

export class OutboxFile {
  readonly db: Database.Database;
  /** The outbox table's rows: emissions and checkpoint updates, written, marked and parked. */
  readonly rows: RowStatements;
  /** Each run's checkpoints, as the job reads and sets them. */
  readonly checkpoints: CheckpointStatements;
  /** The attempts of each run that opened this file or were fenced, and the rule that older ones may not commit. */
  readonly runs: RunAttempts;
  /** What the file keeps about itself: its producer, its last run, the relay's last error. */
  readonly meta: FileMeta;
  /** Emissions held for a run's success, and each attempt's outcome. */
  readonly terminal: TerminalStatements;

  /**
   * @param create whether a missing file (and its folder) is created: a job's outbox is; a file that the
   *   relay or a tool is pointed at must exist, or a misspelt path would quietly become an empty outbox.
   */
  constructor(
    readonly path: string,
    readonly durability: Durability,
    create = true,
  ) {
    try {
      if (create) mkdirSync(dirname(path), { recursive: true });
      else if (!existsSync(path)) throw Object.assign(new Error('no such file; check the path (it is never created here)'), { code: 'ENOENT' });
      if (existsSync(path) && statSync(path).isDirectory()) throw Object.assign(new Error('it is a directory, not a file'), { code: 'EISDIR' });
      this.db = openSqlite(path, durability);
      if (!create) refuseOtherDatabases(this.db);
    } catch (error) {
      throw new OutboxFileError(path, error);
    }
    try {
      migrateSqlite(this.db, outboxMigrations, (found, known) => new SchemaTooNewError(path, found, known));
      this.rows = rowStatements(this.db);
      this.checkpoints = checkpointStatements(this.db);
      this.terminal = terminalStatements(this.db);
    } catch (error) {
      this.db.close();
      throw error instanceof SchemaTooNewError ? error : new OutboxFileError(path, error);
    }
    this.meta = new FileMeta(this.db);
    this.runs = new RunAttempts(this.db, this.terminal, this.rows, this.meta);
  }

  /** Rows (emissions and checkpoint updates) waiting to be delivered. */
  pendingCount(): number {
    return this.rows.countPending.get()?.count ?? 0;
  }

  /** What waits to be delivered, emissions and checkpoint updates apart: a person reads them differently. */
  pendingByKind(): PendingRows {
    const pending: PendingRows = { events: 0, checkpoints: 0 };
    for (const row of this.rows.countByState.all()) {
      if (row.state === 'pending') pending[row.kind === 'event' ? 'events' : 'checkpoints'] += row.count;
    }
    return pending;
  }

  /** Emissions parked as dead. */
  deadCount(): number {
    return this.rows.countDead.get()?.count ?? 0;
  }

  /**
   * Runs `write` without waiting for fsync, then restores the file's durability. Only for writes that
   * can be lost without harm: a receipt lost on power loss is fetched again, since the relay resends
   * the row with its key and the server answers with the original receipt. (SQLite sets synchronous
   * per connection; the next FULL commit makes these frames durable too.)
   */
  withoutFsync<T>(write: () => T): T {
    if (this.durability !== 'full') return write();
    this.db.pragma('synchronous = NORMAL');
    try {
      return write();
    } finally {
      this.db.pragma('synchronous = FULL');
    }
  }


  /**
   * Binds a new file to its producer, and refuses to open one that belongs to another: two producers
   * sharing a file would share stream positions and keys.
   */
  bindProducer(producer: string): void {
    this.db
      .transaction(() => {
        const owner = this.meta.read('producer');
        if (owner === undefined) this.meta.write('producer', producer);
        else if (owner !== producer) {
          throw new WrongOutboxFileError(
            `${this.path}: this outbox belongs to producer "${owner}", not "${producer}"; give each producer its own file`,
          );
        }
      })
      .immediate();
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
