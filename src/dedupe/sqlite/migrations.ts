import type { Migration } from '../../sqlite/migrate.js';

/** The server store's schema, numbered and append-only: never edit a step that has shipped. */
export const serverSqliteMigrations: readonly Migration[] = [
  {
    version: 1,
    name: '001_initial',
    sql: `
      CREATE TABLE assets (
        name TEXT PRIMARY KEY,
        created_at TEXT NOT NULL
      ) WITHOUT ROWID;

      -- One row per idempotency key: the receipt a retry gets back. Kept apart from events so that
      -- dedupe records and events can have their own retention.
      CREATE TABLE dedupe (
        key TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        ts TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) WITHOUT ROWID;

      -- cursor is the global order readers page by; AUTOINCREMENT never reuses a cursor after a delete.
      CREATE TABLE events (
        cursor INTEGER PRIMARY KEY AUTOINCREMENT,
        event_id TEXT NOT NULL UNIQUE,
        key TEXT NOT NULL,
        ts TEXT NOT NULL,
        asset TEXT NOT NULL,
        partition_key TEXT,
        partition_date TEXT,
        extra TEXT,
        producer TEXT NOT NULL,
        workflow TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task TEXT,
        attempt INTEGER NOT NULL,
        seq INTEGER NOT NULL
      );
      CREATE INDEX events_by_asset ON events (asset, cursor);

      -- The last sequence number accepted per producer stream and attempt.
      CREATE TABLE stream_seqs (
        producer TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (producer, run_id, task, attempt)
      ) WITHOUT ROWID;

      -- Items that took a sequence number without becoming an event (rejections, conflicts), so that a
      -- retry of them gets the same answer and the stream goes on past them.
      CREATE TABLE stream_outcomes (
        producer TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        key TEXT NOT NULL,
        status TEXT NOT NULL,
        code TEXT NOT NULL,
        detail TEXT NOT NULL,
        field TEXT,
        PRIMARY KEY (producer, run_id, task, attempt, seq)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 2,
    name: '002_epochs_and_checkpoint_mirror',
    sql: `
      -- Per producer stream (run and task): the highest attempt that has delivered anything. Items of a
      -- lower attempt are fenced from then on.
      CREATE TABLE streams (
        producer TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (producer, run_id, task)
      ) WITHOUT ROWID;

      -- The server's copy of each stream's checkpoints, written by checkpoint items in stream order, so
      -- it is never ahead of the events the server accepted. A retry on a fresh machine resumes from it.
      CREATE TABLE stream_checkpoints (
        producer TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (producer, run_id, task, name)
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 3,
    name: '003_retention_indexes',
    sql: `
      -- Compaction finds old dedupe records and events by age without scanning the tables.
      CREATE INDEX dedupe_by_age ON dedupe (created_at);
      CREATE INDEX events_by_ts ON events (ts);
    `,
  },
  {
    version: 4,
    name: '004_outcome_age',
    sql: `
      -- Recorded outcomes (one per checkpoint update, rejection and conflict) age out with the dedupe
      -- records: past the retry horizon nobody retries them.
      ALTER TABLE stream_outcomes ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;
      CREATE INDEX stream_outcomes_by_age ON stream_outcomes (created_at);
    `,
  },
  {
    version: 5,
    name: '005_dedupe_by_producer',
    sql: `
      -- Keys are scoped by producer: one producer's key can neither answer nor block another's, so no
      -- client can store another producer's next key first. A record is attributed to the producer of its
      -- event; one whose event retention already removed is kept under no producer ('').
      CREATE TABLE dedupe_by_producer (
        producer TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        event_id TEXT NOT NULL,
        ts TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (producer, key)
      ) WITHOUT ROWID;
      INSERT INTO dedupe_by_producer (producer, key, fingerprint, event_id, ts, created_at)
        SELECT coalesce((SELECT e.producer FROM events e WHERE e.event_id = d.event_id), ''), d.key, d.fingerprint, d.event_id, d.ts, d.created_at
        FROM dedupe d;
      DROP TABLE dedupe;
      ALTER TABLE dedupe_by_producer RENAME TO dedupe;
      CREATE INDEX dedupe_by_age ON dedupe (created_at);
    `,
  },
  {
    version: 6,
    name: '006_tokens',
    sql: `
      -- Scoped access tokens. Only a SHA-256 of each secret is kept: a copy of this file lets nobody in.
      -- A revoked token keeps its row, so that its id is never given out again and the list shows it.
      CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        producers TEXT NOT NULL,
        assets TEXT,
        reads TEXT NOT NULL,
        note TEXT NOT NULL,
        created_at TEXT NOT NULL,
        revoked_at TEXT
      ) WITHOUT ROWID;
    `,
  },
  {
    version: 7,
    name: '007_trace_context',
    sql: `
      -- The W3C trace context the producer committed an emission in (JSON), for readers to join its trace.
      ALTER TABLE events ADD COLUMN trace_context TEXT;
    `,
  },
  {
    version: 8,
    name: '008_checkpoint_revisions',
    sql: `
      -- A checkpoint update the producer revised before it was delivered (consecutive checkpoint-only
      -- commits coalesced into one row) is sent again at the same position with a higher revision; the
      -- mirror takes it only while that position is still the newest of its name, and only upwards.
      ALTER TABLE stream_checkpoints ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 9,
    name: '009_event_lineage',
    sql: `
      -- What caused an event (a consumer's emission in response to another event), how deep it is in its
      -- chain, and the asset and partition of every event above it (JSON), so that a feedback loop is
      -- caught by reading one row: the cause's.
      ALTER TABLE events ADD COLUMN caused_by TEXT;
      ALTER TABLE events ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE events ADD COLUMN lineage TEXT;
    `,
  },
  {
    version: 10,
    name: '010_token_consumes',
    sql: `
      -- The assets whose events a publish token's emissions may name as their cause (JSON list; null for
      -- every asset). Tokens made before it name none; an admin token names any.
      ALTER TABLE tokens ADD COLUMN consumes TEXT NOT NULL DEFAULT '[]';
      UPDATE tokens SET consumes = 'null' WHERE scope = 'admin';
    `,
  },
  {
    version: 11,
    name: '011_catalog',
    sql: `
      -- What the catalog (GET /v1/catalog/…, the console) shows beyond the events themselves: the
      -- retries absorbed, when each attempt delivered, the zombies fenced, each run's outcome, when a
      -- consumer group last read. Each is written where the ingest already writes, or only when it happens.
      ALTER TABLE dedupe ADD COLUMN duplicates INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE stream_seqs ADD COLUMN first_at TEXT;
      ALTER TABLE stream_seqs ADD COLUMN last_at TEXT;
      ALTER TABLE stream_seqs ADD COLUMN duplicates INTEGER NOT NULL DEFAULT 0;
      -- NULL while running; 'succeeded', 'failed' (for good) or 'retrying' from its lifecycle events.
      ALTER TABLE streams ADD COLUMN outcome TEXT;
      ALTER TABLE streams ADD COLUMN fetched_at TEXT;
      CREATE INDEX streams_by_activity ON streams (updated_at);
      -- Requests of an attempt refused as fenced (a zombie's), which take no stream position.
      CREATE TABLE stream_fences (
        producer TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        fenced_by INTEGER NOT NULL,
        items INTEGER NOT NULL,
        last_at TEXT NOT NULL,
        PRIMARY KEY (producer, run_id, task, attempt)
      ) WITHOUT ROWID;
      -- A refusal's asset and partition, when its item named them.
      ALTER TABLE stream_outcomes ADD COLUMN asset TEXT;
      ALTER TABLE stream_outcomes ADD COLUMN partition_key TEXT;
      -- Partial indexes: each costs nothing for the rows it leaves out.
      CREATE INDEX refusals_by_age ON stream_outcomes (created_at) WHERE status <> 'checkpointed';
      CREATE INDEX events_by_partition ON events (asset, partition_key, cursor) WHERE partition_key IS NOT NULL;
      CREATE INDEX lifecycle_by_run ON events (producer, run_id, cursor)
        WHERE asset IN ('oncebox.run_succeeded', 'oncebox.run_failed', 'oncebox.run_fenced');
      CREATE INDEX consumer_cursors ON stream_checkpoints (producer, run_id) WHERE name = 'oncebox.cursor';
      -- Counts per asset, advanced over the events after up_to when the catalog is read (never by the
      -- ingest), and lowered by compaction; duplicates are counted as they are absorbed.
      CREATE TABLE asset_rollup (
        asset TEXT PRIMARY KEY,
        events INTEGER NOT NULL DEFAULT 0,
        partitions INTEGER NOT NULL DEFAULT 0,
        duplicates INTEGER NOT NULL DEFAULT 0
      ) WITHOUT ROWID;
      CREATE TABLE rollup_position (id INTEGER PRIMARY KEY CHECK (id = 1), up_to INTEGER NOT NULL);
      INSERT INTO rollup_position VALUES (1, 0);
      -- The outcome of the runs that ended before this version.
      UPDATE streams SET outcome = (
        SELECT CASE WHEN e.asset = 'oncebox.run_succeeded' THEN 'succeeded'
                    WHEN json_extract(e.extra, '$.willRetry') THEN 'retrying' ELSE 'failed' END
        FROM events e
        WHERE e.producer = streams.producer AND e.run_id = streams.run_id AND coalesce(e.task, '') = streams.task
          AND e.asset IN ('oncebox.run_succeeded', 'oncebox.run_failed')
        ORDER BY e.asset = 'oncebox.run_succeeded' DESC, e.cursor DESC LIMIT 1);
    `,
  },
  {
    version: 12,
    name: '012_one_row_per_event',
    sql: `
      -- One row per event: the event carries its own dedupe record (its fingerprint, and created_at while
      -- its key is inside the dedupe window; NULL once compaction released it). An ingest then writes
      -- the event row and one small index entry per event, not a second row. The dedupe table keeps only
      -- the records that outlive their events (event retention shorter than the dedupe window).
      ALTER TABLE events ADD COLUMN fingerprint TEXT;
      ALTER TABLE events ADD COLUMN created_at INTEGER;
      ALTER TABLE events ADD COLUMN duplicates INTEGER NOT NULL DEFAULT 0;
      -- A record names its event by id: a key stored again after its record expired has an older event too.
      UPDATE events SET fingerprint = d.fingerprint, created_at = d.created_at, duplicates = d.duplicates
        FROM dedupe d WHERE d.producer = events.producer AND d.key = events.key AND d.event_id = events.event_id;
      DELETE FROM dedupe WHERE EXISTS (SELECT 1 FROM events e WHERE e.event_id = dedupe.event_id AND e.created_at IS NOT NULL);
      -- The keys inside the window, unique per producer: insert first, as the dedupe table's key did.
      CREATE UNIQUE INDEX events_by_key ON events (producer, key) WHERE created_at IS NOT NULL;
      -- Compaction releases keys by age.
      CREATE INDEX events_by_key_age ON events (created_at) WHERE created_at IS NOT NULL;
    `,
  },
  {
    version: 13,
    name: '013_keys_filed_by_run',
    sql: `
      -- Derived keys are UUIDs, random: one index ordered by (producer, key) puts the 500 events of a request
      -- on 500 pages. A key the producer says comes from its stream's run alone (oncebox-run-keys: a key
      -- derived from the run and a partition key) is filed under the run's slot (a hash of producer, run
      -- and task) and its partition key, beside the run's neighbouring partitions; any other key at slot 0
      -- with partition '' (not NULL: NULLs never collide in a unique index), unique per producer as before.
      -- Every key stored so far is at slot 0, and a claim looks in both places (SqliteDedupeStore's claim),
      -- so a key is never stored twice across the change.
      ALTER TABLE events ADD COLUMN run_slot INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE events ADD COLUMN filed_partition TEXT NOT NULL DEFAULT '';
      DROP INDEX events_by_key;
      CREATE UNIQUE INDEX events_by_key ON events (producer, run_slot, filed_partition, key) WHERE created_at IS NOT NULL;
    `,
  },
  {
    version: 14,
    name: '014_outcome_attempt',
    sql: `
      -- The attempt whose lifecycle event set the run's outcome: a failure of an earlier attempt, delivered
      -- later (taken over by a retry on the same file, or sent again from a dead row), does not overwrite
      -- what a later attempt said of the run.
      ALTER TABLE streams ADD COLUMN outcome_attempt INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 15,
    name: '015_asset_marks',
    sql: `
      -- A consumer group's lag, the events of its assets after its cursor, in a few index probes whatever
      -- the backlog: every event of an asset has an ordinal (the asset's events counted in cursor order,
      -- never lowered by retention), kept as a running total beside the counts, and every 64th is marked
      -- with its cursor. The rollup counts the events again from the first, to give them their ordinals:
      -- the first catalog reads after this upgrade do that, a slice at a time.
      ALTER TABLE asset_rollup ADD COLUMN ordinal INTEGER NOT NULL DEFAULT 0;
      CREATE TABLE asset_marks (
        asset TEXT NOT NULL,
        cursor INTEGER NOT NULL,
        ordinal INTEGER NOT NULL,
        PRIMARY KEY (asset, cursor)
      ) WITHOUT ROWID;
      UPDATE asset_rollup SET events = 0, partitions = 0;
      UPDATE rollup_position SET up_to = 0;
    `,
  },
  {
    version: 16,
    name: '016_unplaced_refusals',
    sql: `
      -- Refusals that hold no position of their own, for the catalog's list: an item at a position another
      -- key holds (sequence_reused), and the items of a request refused whole (attempt_too_high). Once per
      -- item and code, however often it is sent again; removed with the refusals, after the dedupe retention.
      CREATE TABLE stream_refusals (
        producer TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        key TEXT NOT NULL,
        status TEXT NOT NULL,
        code TEXT NOT NULL,
        detail TEXT NOT NULL,
        field TEXT,
        asset TEXT,
        partition_key TEXT,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (producer, run_id, task, attempt, seq, key, code)
      ) WITHOUT ROWID;
      CREATE INDEX stream_refusals_by_age ON stream_refusals (created_at);
    `,
  },
];
