import Database from 'better-sqlite3';

/**
 * The outbox a careful engineer would write by hand, as the benchmarks' raw side: one table in commit
 * order with a unique index on the idempotency key, the stream's unique positions and an index of the
 * pending rows, plus the checkpoint table; WAL, synchronous=FULL, plain prepared statements. It is the
 * layout oncebox used before it indexed keys by scope (outbox migration 007), frozen here so that the
 * raw side does not move when oncebox's own layout does.
 */
export interface RawRow {
  key: string;
  seq: number;
  kind: 'event' | 'checkpoint';
  asset: string;
  partitionKey: string | null;
  extra: string | null;
  checkpointName: string | null;
  checkpointValue: string | null;
}

export interface RawOutbox {
  db: Database.Database;
  insertRow: Database.Statement<[RawRow]>;
  setCheckpoint: Database.Statement<[string, string]>;
  markDelivered: Database.Statement<[string, string, number]>;
}

export function rawOutbox(path: string): RawOutbox {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec(`
    CREATE TABLE outbox (
      id INTEGER PRIMARY KEY,
      key TEXT NOT NULL UNIQUE,
      fingerprint TEXT NOT NULL,
      workflow TEXT NOT NULL,
      run_id TEXT NOT NULL,
      task TEXT NOT NULL,
      attempt INTEGER NOT NULL,
      seq INTEGER NOT NULL,
      kind TEXT NOT NULL,
      asset TEXT NOT NULL,
      partition_key TEXT,
      partition_date TEXT,
      extra TEXT,
      committed_at INTEGER NOT NULL,
      state TEXT NOT NULL DEFAULT 'pending',
      event_id TEXT,
      event_ts TEXT,
      duplicate INTEGER,
      settled_at INTEGER,
      checkpoint_name TEXT,
      checkpoint_value TEXT,
      UNIQUE (run_id, task, attempt, seq)
    );
    CREATE INDEX outbox_pending ON outbox (id) WHERE state = 'pending';
    CREATE TABLE checkpoints (name TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
  `);
  return {
    db,
    insertRow: db.prepare<[RawRow]>(
      `INSERT INTO outbox (key, fingerprint, workflow, run_id, task, attempt, seq, kind, asset, partition_key, extra, committed_at, checkpoint_name, checkpoint_value)
       VALUES (@key, 'f', 'w', 'r', 't', 1, @seq, @kind, @asset, @partitionKey, @extra, 0, @checkpointName, @checkpointValue)
       ON CONFLICT (key) DO NOTHING`,
    ),
    setCheckpoint: db.prepare<[string, string]>('INSERT INTO checkpoints VALUES (?, ?, 0) ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at'),
    markDelivered: db.prepare<[string, string, number]>("UPDATE outbox SET state = 'delivered', event_id = ?, event_ts = ?, duplicate = 0, settled_at = 0 WHERE id = ? AND state = 'pending'"),
  };
}
