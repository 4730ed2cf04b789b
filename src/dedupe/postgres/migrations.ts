/** One numbered, append-only PostgreSQL schema step. Never edit one that has shipped; add the next number. */
export interface PostgresMigration {
  version: number;
  name: string;
  /** Runs with search_path set to the store's schema, so table names are unqualified. */
  sql: string;
}

/** The PostgreSQL store's schema: the same tables as the SQLite store, plus what many writers need. */
export const serverPostgresMigrations: readonly PostgresMigration[] = [
  {
    version: 1,
    name: '001_initial',
    sql: `
      CREATE TABLE assets (
        name text PRIMARY KEY,
        created_at text NOT NULL
      );

      -- One row per idempotency key: the receipt a retry gets back.
      CREATE TABLE dedupe (
        key text PRIMARY KEY,
        fingerprint text NOT NULL,
        event_id text NOT NULL,
        ts text NOT NULL,
        created_at bigint NOT NULL
      );
      CREATE INDEX dedupe_by_age ON dedupe (created_at);

      -- id is the insertion order. cursor, the order readers page by, is given only to committed rows, by
      -- one sequencer at a time (see PostgresDedupeStore.sequenceEvents): a reader that saw cursor c never
      -- later finds a row below c, however late the row's transaction committed.
      CREATE TABLE events (
        id bigserial PRIMARY KEY,
        cursor bigint UNIQUE,
        event_id text NOT NULL UNIQUE,
        key text NOT NULL,
        ts text NOT NULL,
        asset text NOT NULL,
        partition_key text,
        partition_date text,
        extra text,
        producer text NOT NULL,
        workflow text NOT NULL,
        run_id text NOT NULL,
        task text,
        attempt integer NOT NULL,
        seq bigint NOT NULL
      );
      CREATE INDEX events_unsequenced ON events (id) WHERE cursor IS NULL;
      CREATE INDEX events_by_asset ON events (asset, cursor);
      CREATE INDEX events_by_ts ON events (ts);

      CREATE TABLE event_cursor (
        id integer PRIMARY KEY CHECK (id = 1),
        last bigint NOT NULL
      );
      INSERT INTO event_cursor VALUES (1, 0);

      -- Per stream: the epoch (highest attempt that delivered). Its row is also the lock that serialises
      -- every request of one stream across server instances.
      CREATE TABLE streams (
        producer text NOT NULL,
        run_id text NOT NULL,
        task text NOT NULL,
        epoch integer NOT NULL,
        updated_at text NOT NULL,
        PRIMARY KEY (producer, run_id, task)
      );

      CREATE TABLE stream_seqs (
        producer text NOT NULL,
        run_id text NOT NULL,
        task text NOT NULL,
        attempt integer NOT NULL,
        last_seq bigint NOT NULL,
        PRIMARY KEY (producer, run_id, task, attempt)
      );

      CREATE TABLE stream_outcomes (
        producer text NOT NULL,
        run_id text NOT NULL,
        task text NOT NULL,
        attempt integer NOT NULL,
        seq bigint NOT NULL,
        key text NOT NULL,
        status text NOT NULL,
        code text NOT NULL,
        detail text NOT NULL,
        field text,
        PRIMARY KEY (producer, run_id, task, attempt, seq)
      );

      CREATE TABLE stream_checkpoints (
        producer text NOT NULL,
        run_id text NOT NULL,
        task text NOT NULL,
        name text NOT NULL,
        value text NOT NULL,
        attempt integer NOT NULL,
        seq bigint NOT NULL,
        updated_at text NOT NULL,
        PRIMARY KEY (producer, run_id, task, name)
      );
    `,
  },
  {
    version: 2,
    name: '002_outcome_age',
    sql: `
      -- Recorded outcomes (one per checkpoint update, rejection and conflict) age out with the dedupe
      -- records: past the retry horizon nobody retries them.
      ALTER TABLE stream_outcomes ADD COLUMN created_at bigint NOT NULL DEFAULT 0;
      CREATE INDEX stream_outcomes_by_age ON stream_outcomes (created_at);
    `,
  },
  {
    version: 3,
    name: '003_lean_event_indexes',
    sql: `
      -- Every ingested event used to add eight B-tree entries, four of them for a cursor that is still
      -- NULL at insert and gets its real entry only when the sequencer sets it (an UPDATE that indexes the
      -- row again anyway). Now an insert adds three B-tree entries (dedupe key, events id, unsequenced).
      --
      -- Cursor lookups only ever ask for sequenced rows, so their indexes leave the NULLs out.
      ALTER TABLE events DROP CONSTRAINT events_cursor_key;
      CREATE UNIQUE INDEX events_by_cursor ON events (cursor) WHERE cursor IS NOT NULL;
      DROP INDEX events_by_asset;
      CREATE INDEX events_by_asset ON events (asset, cursor) WHERE cursor IS NOT NULL;
      -- Event ids are UUIDv7, unique by construction, and nothing looks an event up by its id.
      ALTER TABLE events DROP CONSTRAINT events_event_id_key;
      -- Ages are only scanned by compaction, and rows arrive in time order: a BRIN index, a few pages
      -- in all, finds the old ones without a B-tree entry per row.
      DROP INDEX events_by_ts;
      CREATE INDEX events_by_ts ON events USING brin (ts);
      DROP INDEX dedupe_by_age;
      CREATE INDEX dedupe_by_age ON dedupe USING brin (created_at);
      -- Keys and event ids are UUIDs (the server refuses anything else, and since this version writes
      -- their hex in lower case): as uuid they take 16 bytes instead of 37 and compare as bytes rather
      -- than through the database's collation, so the dedupe index is half the size and inserts into
      -- it cost less. oncebox's relay has always sent keys in lower case; a store that holds one UUID
      -- under two spellings (only another client could have sent them) stops here with a unique
      -- violation, and the later of the two records must be deleted by hand first.
      ALTER TABLE dedupe ALTER COLUMN key TYPE uuid USING key::uuid, ALTER COLUMN event_id TYPE uuid USING event_id::uuid;
      ALTER TABLE events ALTER COLUMN key TYPE uuid USING key::uuid, ALTER COLUMN event_id TYPE uuid USING event_id::uuid;
    `,
  },
  {
    version: 4,
    name: '004_dedupe_by_producer',
    sql: `
      -- Keys are scoped by producer: one producer's key can neither answer nor block another's, so no
      -- client can store another producer's next key first. A record is attributed to the producer of its
      -- event; one whose event retention already removed is kept under no producer (''). The primary key
      -- is rebuilt: on a large store, upgrade at a quiet time.
      ALTER TABLE dedupe ADD COLUMN producer text NOT NULL DEFAULT '';
      UPDATE dedupe d SET producer = e.producer FROM events e WHERE e.event_id = d.event_id;
      ALTER TABLE dedupe ALTER COLUMN producer DROP DEFAULT;
      ALTER TABLE dedupe DROP CONSTRAINT dedupe_pkey, ADD PRIMARY KEY (producer, key);
    `,
  },
  {
    version: 5,
    name: '005_tokens',
    sql: `
      -- Scoped access tokens. Only a SHA-256 of each secret is kept: a copy of this database lets nobody
      -- in. A revoked token keeps its row, so that its id is never given out again and the list shows it.
      CREATE TABLE tokens (
        id text PRIMARY KEY,
        hash text NOT NULL UNIQUE,
        scope text NOT NULL,
        producers text NOT NULL,
        assets text,
        reads text NOT NULL,
        note text NOT NULL,
        created_at text NOT NULL,
        revoked_at text
      );
    `,
  },
  {
    version: 6,
    name: '006_trace_context',
    sql: `
      -- The W3C trace context the producer committed an emission in (JSON), for readers to join its trace.
      ALTER TABLE events ADD COLUMN trace_context text;
    `,
  },
  {
    version: 7,
    name: '007_checkpoint_revisions',
    sql: `
      -- A checkpoint update the producer revised before it was delivered (consecutive checkpoint-only
      -- commits coalesced into one row) is sent again at the same position with a higher revision; the
      -- mirror takes it only while that position is still the newest of its name, and only upwards.
      ALTER TABLE stream_checkpoints ADD COLUMN revision integer NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 8,
    name: '008_event_lineage',
    sql: `
      -- What caused an event (a consumer's emission in response to another event), how deep it is in its
      -- chain, and the asset and partition of every event above it (JSON), so that a feedback loop is
      -- caught by reading one row: the cause's.
      ALTER TABLE events ADD COLUMN caused_by uuid, ADD COLUMN depth integer NOT NULL DEFAULT 0, ADD COLUMN lineage text;
    `,
  },
  {
    version: 9,
    name: '009_token_consumes',
    sql: `
      -- The assets whose events a publish token's emissions may name as their cause (JSON list; null for
      -- every asset). Tokens made before it name none; an admin token names any.
      ALTER TABLE tokens ADD COLUMN consumes text NOT NULL DEFAULT '[]';
      UPDATE tokens SET consumes = 'null' WHERE scope = 'admin';
    `,
  },
  {
    version: 10,
    name: '010_catalog',
    sql: `
      -- What the catalog (GET /v1/catalog/…, the console) shows beyond the events themselves: the
      -- retries absorbed, when each attempt delivered, the zombies fenced, each run's outcome, when a
      -- consumer group last read. Each is written where the ingest already writes, or only when it happens.
      ALTER TABLE dedupe ADD COLUMN duplicates integer NOT NULL DEFAULT 0;
      ALTER TABLE stream_seqs ADD COLUMN first_at text, ADD COLUMN last_at text, ADD COLUMN duplicates integer NOT NULL DEFAULT 0;
      -- NULL while running; 'succeeded', 'failed' (for good) or 'retrying' from its lifecycle events.
      ALTER TABLE streams ADD COLUMN outcome text, ADD COLUMN fetched_at text;
      CREATE INDEX streams_by_activity ON streams (updated_at);
      -- Requests of an attempt refused as fenced (a zombie's), which take no stream position.
      CREATE TABLE stream_fences (
        producer text NOT NULL,
        run_id text NOT NULL,
        task text NOT NULL,
        attempt integer NOT NULL,
        fenced_by integer NOT NULL,
        items integer NOT NULL,
        last_at text NOT NULL,
        PRIMARY KEY (producer, run_id, task, attempt)
      );
      -- A refusal's asset and partition, when its item named them.
      ALTER TABLE stream_outcomes ADD COLUMN asset text, ADD COLUMN partition_key text;
      -- Partial indexes: each costs nothing for the rows it leaves out.
      CREATE INDEX refusals_by_age ON stream_outcomes (created_at) WHERE status <> 'checkpointed';
      CREATE INDEX events_by_partition ON events (asset, partition_key, cursor) WHERE partition_key IS NOT NULL AND cursor IS NOT NULL;
      CREATE INDEX lifecycle_by_run ON events (producer, run_id, cursor)
        WHERE asset IN ('oncebox.run_succeeded', 'oncebox.run_failed', 'oncebox.run_fenced');
      CREATE INDEX consumer_cursors ON stream_checkpoints (producer, run_id) WHERE name = 'oncebox.cursor';
      -- Counts per asset, advanced over the events after up_to when the catalog is read (never by the
      -- ingest), and lowered by compaction; duplicates are counted as they are absorbed.
      CREATE TABLE asset_rollup (
        asset text PRIMARY KEY,
        events bigint NOT NULL DEFAULT 0,
        partitions bigint NOT NULL DEFAULT 0,
        duplicates bigint NOT NULL DEFAULT 0
      );
      CREATE TABLE rollup_position (id integer PRIMARY KEY CHECK (id = 1), up_to bigint NOT NULL);
      INSERT INTO rollup_position VALUES (1, 0);
      -- The outcome of the runs that ended before this version.
      UPDATE streams SET outcome = (
        SELECT CASE WHEN e.asset = 'oncebox.run_succeeded' THEN 'succeeded'
                    WHEN (e.extra::jsonb ->> 'willRetry')::boolean THEN 'retrying' ELSE 'failed' END
        FROM events e
        WHERE e.producer = streams.producer AND e.run_id = streams.run_id AND coalesce(e.task, '') = streams.task
          AND e.asset IN ('oncebox.run_succeeded', 'oncebox.run_failed')
        ORDER BY e.asset = 'oncebox.run_succeeded' DESC, e.id DESC LIMIT 1);
    `,
  },
  {
    version: 11,
    name: '011_cursor_at_insert',
    sql: `
      -- An event takes its cursor when it is inserted, from a sequence, under a transaction-scoped advisory
      -- lock that the request holds until it commits (PostgresIngestSteps): the requests that store events
      -- commit one after another, in cursor order, so a reader never finds a row below a cursor it has
      -- passed. Before this version a sequencer numbered committed rows before each read, with an UPDATE
      -- of every event row that wrote each of its indexes a second time. The rows it had not numbered
      -- yet are numbered here, as it would have.
      UPDATE events SET cursor = (SELECT last FROM event_cursor) + numbered.rn
      FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM events WHERE cursor IS NULL) AS numbered
      WHERE events.id = numbered.id;
      CREATE SEQUENCE event_cursors;
      -- Above every cursor ever given, also those of events retention has removed since.
      SELECT setval('event_cursors', greatest((SELECT last FROM event_cursor), coalesce((SELECT max(cursor) FROM events), 0)) + 1, false);
      ALTER TABLE events ALTER COLUMN cursor SET DEFAULT nextval('event_cursors'), ALTER COLUMN cursor SET NOT NULL;
      DROP INDEX events_unsequenced;
      DROP TABLE event_cursor;
      -- The insertion order the sequencer went by: the cursor is the event's identity now, and its
      -- unique index the only one an event needs besides those readers page by.
      ALTER TABLE events DROP COLUMN id;
    `,
  },
  {
    version: 12,
    name: '012_one_row_per_event',
    sql: `
      -- The event row is its own dedupe record: its key's fingerprint, the time the key entered the dedupe
      -- window (NULL once compaction releases the key), and the retries absorbed. A claim is the event's
      -- insert, unique per producer and key while the key is in the window. The dedupe table keeps only
      -- the records that outlive their events (an event removed by a shorter event retention inside the
      -- window). Every event row is written once here: on a large store, upgrade at a quiet time.
      ALTER TABLE events ADD COLUMN fingerprint text, ADD COLUMN created_at bigint, ADD COLUMN duplicates integer NOT NULL DEFAULT 0;
      UPDATE events e SET fingerprint = d.fingerprint, created_at = d.created_at, duplicates = d.duplicates
      FROM dedupe d WHERE d.producer = e.producer AND d.key = e.key AND d.event_id = e.event_id;
      DELETE FROM dedupe d USING events e WHERE d.producer = e.producer AND d.key = e.key AND d.event_id = e.event_id;
      CREATE UNIQUE INDEX events_by_key ON events (producer, key) WHERE created_at IS NOT NULL;
      -- Keys enter the window in time order: compaction finds the old ones with a few pages, as for dedupe.
      CREATE INDEX events_by_key_age ON events USING brin (created_at);
    `,
  },
  {
    version: 13,
    name: '013_keys_filed_by_run',
    sql: `
      -- Derived keys are random UUIDs: an index ordered by (producer, key) puts a request's events on as
      -- many leaf pages, each written whole to the WAL the first time after a checkpoint. A key the producer
      -- says comes from its stream's run alone (oncebox-run-keys) is filed under its run's slot (a hash of
      -- producer, run and task) and its partition key, beside the run's neighbouring partitions; any other
      -- key at slot 0 with partition '', unique per producer as before (key-places.ts, as on the embedded
      -- store). Every key stored so far is at slot 0, and a claim looks in both places, so a key is never
      -- stored twice across the change. The index is built again: on a large store, upgrade at a quiet time.
      ALTER TABLE events ADD COLUMN run_slot bigint NOT NULL DEFAULT 0, ADD COLUMN filed_partition text NOT NULL DEFAULT '';
      DROP INDEX events_by_key;
      CREATE UNIQUE INDEX events_by_key ON events (producer, run_slot, filed_partition, key) WHERE created_at IS NOT NULL;
    `,
  },
  {
    version: 14,
    name: '014_checkpoint_names_hashed',
    sql: `
      -- A checkpoint's name is unique in its stream by its hash: producer, run, task and name may each take
      -- 800 bytes (200 characters of four bytes), and PostgreSQL refuses a B-tree entry of over 2,704, so a
      -- key of all four refused such a checkpoint with an error (the stream's three alone still fit).
      ALTER TABLE stream_checkpoints DROP CONSTRAINT stream_checkpoints_pkey;
      CREATE UNIQUE INDEX stream_checkpoints_by_name ON stream_checkpoints (producer, run_id, task, md5(name));
    `,
  },
  {
    version: 15,
    name: '015_outcome_attempt',
    sql: `
      -- The attempt whose lifecycle event set the run's outcome: a failure of an earlier attempt, delivered
      -- later (taken over by a retry on the same file, or sent again from a dead row), does not overwrite
      -- what a later attempt said of the run.
      ALTER TABLE streams ADD COLUMN outcome_attempt integer NOT NULL DEFAULT 0;
    `,
  },
  {
    version: 16,
    name: '016_asset_marks',
    sql: `
      -- A consumer group's lag, the events of its assets after its cursor, in a few index probes whatever
      -- the backlog: every event of an asset has an ordinal (the asset's events counted in cursor order,
      -- never lowered by retention), kept as a running total beside the counts, and every 64th is marked
      -- with its cursor. The rollup counts the events again from the first, to give them their ordinals:
      -- the first catalog reads after this upgrade do that, a slice at a time.
      ALTER TABLE asset_rollup ADD COLUMN ordinal bigint NOT NULL DEFAULT 0;
      CREATE TABLE asset_marks (
        asset TEXT NOT NULL,
        cursor bigint NOT NULL,
        ordinal bigint NOT NULL,
        PRIMARY KEY (asset, cursor)
      );
      UPDATE asset_rollup SET events = 0, partitions = 0;
      UPDATE rollup_position SET up_to = 0;
    `,
  },
  {
    version: 17,
    name: '017_unplaced_refusals',
    sql: `
      -- Refusals that hold no position of their own, for the catalog's list: an item at a position another
      -- key holds (sequence_reused), and the items of a request refused whole (attempt_too_high). Once per
      -- item and code, however often it is sent again; removed with the refusals, after the dedupe retention.
      CREATE TABLE stream_refusals (
        producer text NOT NULL,
        run_id text NOT NULL,
        task text NOT NULL,
        attempt integer NOT NULL,
        seq bigint NOT NULL,
        key text NOT NULL,
        status text NOT NULL,
        code text NOT NULL,
        detail text NOT NULL,
        field text,
        asset text,
        partition_key text,
        created_at bigint NOT NULL,
        PRIMARY KEY (producer, run_id, task, attempt, seq, key, code)
      );
      CREATE INDEX stream_refusals_by_age ON stream_refusals (created_at);
    `,
  },
];
