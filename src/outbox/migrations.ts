import type { Migration } from '../sqlite/migrate.js';

/** The outbox file's schema, numbered and append-only: never edit a step that has shipped. */
export const outboxMigrations: readonly Migration[] = [
  {
    version: 1,
    name: '001_initial',
    sql: `
      -- Facts about the file itself, such as the producer it belongs to.
      CREATE TABLE meta (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
      ) WITHOUT ROWID;

      -- One row per committed emission. id is the commit order the relay delivers in.
      -- task is '' for a workflow-level emission, so that the unique stream position holds for it too.
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
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
        event_id TEXT,
        event_ts TEXT,
        duplicate INTEGER,
        settled_at INTEGER,
        dead_code TEXT,
        dead_reason TEXT,
        UNIQUE (run_id, task, attempt, seq)
      );
      CREATE INDEX outbox_pending ON outbox (id) WHERE state = 'pending';

      CREATE TABLE checkpoints (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        updated_at INTEGER NOT NULL
      ) WITHOUT ROWID;

      -- At most one relay delivers from this file at a time: the one whose owner token is here.
      CREATE TABLE lease (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        owner TEXT NOT NULL,
        pid INTEGER NOT NULL,
        host TEXT NOT NULL,
        expires_at INTEGER NOT NULL
      );
    `,
  },
  {
    version: 2,
    name: '002_checkpoint_rows',
    sql: `
      -- Checkpoint updates travel in the stream too (kind 'checkpoint', asset ''), after the emissions of
      -- their commit, so that the server's copy of a checkpoint never runs ahead of its events.
      ALTER TABLE outbox ADD COLUMN checkpoint_name TEXT;
      ALTER TABLE outbox ADD COLUMN checkpoint_value TEXT;
    `,
  },
  {
    version: 3,
    name: '003_prune_index',
    sql: `
      -- The relay prunes delivered rows by age, so the file stays small however long the job runs.
      CREATE INDEX outbox_delivered_by_age ON outbox (settled_at) WHERE state = 'delivered';
    `,
  },
  {
    version: 4,
    name: '004_run_attempts',
    sql: `
      -- What this file knows of each run's attempts. opened_by is the highest attempt that has opened the
      -- file: every commit checks it, so once attempt N has opened the file no older attempt of the run can
      -- commit to it (a zombie on the same machine). fenced_by is the highest attempt the server said has
      -- delivered for the run (0: none): attempts below it are zombies too.
      CREATE TABLE runs (
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        opened_by INTEGER NOT NULL,
        fenced_by INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, task)
      ) WITHOUT ROWID;

      -- A file from before this step: the attempts that committed to it have opened it.
      INSERT INTO runs (run_id, task, opened_by)
        SELECT run_id, task, max(attempt) FROM outbox GROUP BY run_id, task;

      -- The fence the relay recorded as JSON in meta moves here.
      INSERT INTO runs (run_id, task, opened_by, fenced_by)
        SELECT json_extract(value, '$.runId'), coalesce(json_extract(value, '$.task'), ''), 0, json_extract(value, '$.by')
        FROM meta WHERE name = 'fenced' AND json_valid(value)
        ON CONFLICT (run_id, task) DO UPDATE SET fenced_by = excluded.fenced_by;
      DELETE FROM meta WHERE name = 'fenced';
    `,
  },
  {
    version: 5,
    name: '005_dead_letter_actions',
    sql: `
      -- What was done about each dead row: sent again (it moved to the end of the file as a pending row
      -- of the run's current attempt, with its key), or discarded (the row is gone from the outbox and
      -- kept here whole). Nothing about a dead row is ever silent.
      CREATE TABLE dead_letter_actions (
        id INTEGER PRIMARY KEY,
        row_key TEXT NOT NULL,
        action TEXT NOT NULL CHECK (action IN ('retried', 'discarded')),
        at INTEGER NOT NULL,
        dead_code TEXT,
        dead_reason TEXT,
        note TEXT NOT NULL,
        row TEXT NOT NULL
      );
    `,
  },
  {
    version: 6,
    name: '006_trace_context',
    sql: `
      -- The W3C trace context an emission was committed in (JSON), sent with it; metadata, not payload.
      ALTER TABLE outbox ADD COLUMN trace_context TEXT;
    `,
  },
];
