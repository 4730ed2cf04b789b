import type { Migration } from '../../sqlite/migrate.js';

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
  {
    version: 7,
    name: '007_keys_by_scope',
    sql: `
      -- A unique index on the random UUID key put each new row on a random page of the index: about one
      -- page written per row. Keys are now unique within their scope, indexed where they fall together:
      --   'partition': derived from a partition key, so unique per (run, task, asset, partition): the index
      --     is ordered by partition, and a commit's rows land on a few neighbouring pages;
      --   'file': an explicit key, or one derived from the commit's position, unique in the whole file;
      --   'stream': a checkpoint update, unique by its stream position;
      --   'legacy': a row from before this step, whose scope is not known: it is in both key indexes.
      -- SQLite cannot drop a UNIQUE constraint, so the table is rebuilt, row for row and id for id.
      CREATE TABLE outbox_by_scope (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        -- A row written without a scope is found by both key indexes, like a row from before them.
        key_scope TEXT NOT NULL DEFAULT 'legacy' CHECK (key_scope IN ('partition', 'file', 'stream', 'legacy')),
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
        checkpoint_name TEXT,
        checkpoint_value TEXT,
        trace_context TEXT,
        UNIQUE (run_id, task, attempt, seq)
      );
      INSERT INTO outbox_by_scope (id, key, key_scope, fingerprint, workflow, run_id, task, attempt, seq, kind, asset, partition_key,
          partition_date, extra, committed_at, state, event_id, event_ts, duplicate, settled_at, dead_code, dead_reason,
          checkpoint_name, checkpoint_value, trace_context)
        SELECT id, key, CASE WHEN kind = 'checkpoint' THEN 'stream' ELSE 'legacy' END, fingerprint, workflow, run_id, task, attempt,
          seq, kind, asset, partition_key, partition_date, extra, committed_at, state, event_id, event_ts, duplicate, settled_at,
          dead_code, dead_reason, checkpoint_name, checkpoint_value, trace_context
        FROM outbox;
      DROP TABLE outbox;
      ALTER TABLE outbox_by_scope RENAME TO outbox;
      CREATE INDEX outbox_pending ON outbox (id) WHERE state = 'pending';
      CREATE INDEX outbox_delivered_by_age ON outbox (settled_at) WHERE state = 'delivered';
      CREATE UNIQUE INDEX outbox_partition_keys ON outbox (run_id, task, asset, partition_key, key) WHERE key_scope IN ('partition', 'legacy');
      CREATE UNIQUE INDEX outbox_file_keys ON outbox (key) WHERE key_scope IN ('file', 'legacy');
    `,
  },
  {
    version: 8,
    name: '008_checkpoint_revisions',
    sql: `
      -- Consecutive checkpoint-only commits are coalesced into the stream's last row while it waits to be
      -- delivered: the newest value wins, and the row's revision counts how often it was rewritten, so
      -- that the server takes the rewrite even when an older revision reached it first.
      ALTER TABLE outbox ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 9,
    name: '009_consumers',
    sql: `
      -- The stored event an emission responds to, by its cursor on the server: a consumer's tx.emit sets
      -- it, and the server derives the emission's lineage from it (feedback-loop protection).
      ALTER TABLE outbox ADD COLUMN cause_cursor INTEGER;

      -- A consumer's file: the events it has processed, marked in the same transaction as their effect,
      -- so that one delivered twice is skipped the second time.
      CREATE TABLE consumed (
        event_id TEXT PRIMARY KEY,
        cursor INTEGER NOT NULL,
        consumed_at INTEGER NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX consumed_by_cursor ON consumed (cursor);

      -- Per-partition triggers: the newest event of each listed asset for a partition (as JSON, to hand
      -- to the trigger), and how often the trigger fired for the partition (refreshes count up).
      CREATE TABLE trigger_arrivals (
        trigger TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        asset TEXT NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (trigger, partition_key, asset)
      ) WITHOUT ROWID;
      CREATE TABLE trigger_firings (
        trigger TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        fired INTEGER NOT NULL,
        last_cursor INTEGER NOT NULL,
        fired_at INTEGER NOT NULL,
        PRIMARY KEY (trigger, partition_key)
      ) WITHOUT ROWID;

      -- A consumer that started on a fresh file rebuilds its triggers' state from the events up to the
      -- cursor it resumed from; the row keeps how far it got, so that a rebuild stopped part-way goes on.
      CREATE TABLE trigger_rebuild (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        up_to INTEGER NOT NULL,
        done_through INTEGER NOT NULL
      );
    `,
  },
  {
    version: 10,
    name: '010_lifecycle',
    sql: `
      -- Emissions held for the run's success (tx.emit(asset, { on: 'success' })): written in their own
      -- commit with their key, released into the outbox by box.complete, discarded by box.fail. Scoped
      -- by run and task, not attempt: a retry's complete releases what an earlier attempt held and never
      -- released, and the key makes one row of what both held.
      CREATE TABLE held_emissions (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        key TEXT NOT NULL,
        key_scope TEXT NOT NULL CHECK (key_scope IN ('partition', 'file')),
        fingerprint TEXT NOT NULL,
        asset TEXT NOT NULL,
        partition_key TEXT,
        partition_date TEXT,
        extra TEXT,
        trace_context TEXT,
        committed_at INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('held', 'released', 'discarded')),
        settled_at INTEGER,
        reason TEXT
      );
      CREATE INDEX held_by_run ON held_emissions (run_id, task, state);

      -- Each attempt's outcome, written by its terminal commit: a second terminal commit of the attempt
      -- finds it and does nothing (the failure callback run twice), or is refused (complete after fail).
      CREATE TABLE run_outcomes (
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('succeeded', 'failed')),
        reason TEXT,
        at INTEGER NOT NULL,
        PRIMARY KEY (run_id, task, attempt)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 11,
    name: '011_checkpoints_by_run',
    sql: `
      -- Checkpoints belong to a run's task, as the server's copy does: several runs and tasks may share a
      -- file, and none reads another's progress (a new run on the file of yesterday's starts from
      -- scratch, not from yesterday's last batch). The file's checkpoints of before go to the run that
      -- committed last, which is the one a retry on this file resumes.
      CREATE TABLE checkpoints_by_run (
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, task, name)
      ) WITHOUT ROWID;
      INSERT INTO checkpoints_by_run (run_id, task, name, value, updated_at)
        SELECT last.run_id, last.task, checkpoints.name, checkpoints.value, checkpoints.updated_at
        FROM checkpoints, (SELECT run_id, task FROM outbox ORDER BY id DESC LIMIT 1) AS last;
      DROP TABLE checkpoints;
      ALTER TABLE checkpoints_by_run RENAME TO checkpoints;
    `,
  },
];
