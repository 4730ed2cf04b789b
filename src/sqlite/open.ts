import Database from 'better-sqlite3';

/**
 * How hard SQLite works to keep a commit across a power cut. `full` (the default) fsyncs the WAL on
 * every commit, so a commit that has returned survives the machine losing power. `normal` fsyncs only at
 * checkpoints: about ten times the commit rate, but the last commits can be lost on power loss (never
 * on a process crash).
 */
export type Durability = 'full' | 'normal';

/** @internal Opens a SQLite file the way both the outbox and the server store want it. */
export function openSqlite(path: string, durability: Durability): Database.Database {
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${durability === 'full' ? 'FULL' : 'NORMAL'}`);
    // Another connection holding the write lock (a relay process beside the job) is waited for, not failed.
    db.pragma('busy_timeout = 5000');
    db.pragma('foreign_keys = ON');
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}
