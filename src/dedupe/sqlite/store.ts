import type Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { OptionsError, SchemaTooNewError } from '../../protocol/errors.js';
import type { EventPage, ItemResult, StreamIdentity, StreamState } from '../../protocol/wire.js';
import { migrateSqlite } from '../../sqlite/migrate.js';
import { openSqlite, type Durability } from '../../sqlite/open.js';
import { queryBuilder, type Prepared } from '../../sqlite/statements.js';
import type { DedupeRecord, PositionOutcome, RecordedOutcome } from '../ingest/resolve.js';
import { ingestPolicy, ingestSteps, runIngestSync, TRUSTED_SCOPE, type IngestClock, type IngestPolicy, type IngestScope, type StepHandler } from '../ingest/steps.js';
import type { CheckedItem, InvalidItem } from '../item-check.js';
import { type CompactionResult, type DedupeStore, type EventQuery, type RetentionPolicy, type StoreSizes } from '../store.js';
import { attemptOf, countsByAsset, deleteInBatches, streamOf, toCauseEvent, toStoredEvent } from '../tables.js';
import type { CauseEvent, LineagePolicy } from '../ingest/lineage.js';
import { answerGroup, type GroupOutcome, type WaitingIngest } from '../ingest/group-commit.js';
import { decideClaim, type AttemptClaim, type ClaimDecision } from '../attempt-claim.js';
import { EventSignal } from '../event-signal.js';
import { storedAssets } from '../stored-assets.js';
import { TokenRegistry } from '../tokens.js';
import { serverSqliteMigrations } from './migrations.js';
import { serverStatements } from './statements.js';
import { Catalog } from '../catalog/catalog.js';
import { SqliteCatalogDatabase } from '../catalog/sqlite-database.js';
import { forgetRemoved } from '../catalog/rollup.js';
import { firstFound, KeyPlaces } from '../key-places.js';
import { claimedEventRow } from './claimed-event.js';

export interface SqliteStoreOptions {
  path: string;
  durability?: Durability;
  /** The clock the store stamps events and dedupe records with; injectable for tests. */
  now?: () => Date;
  /** How far above a stream's epoch a new attempt may be (see refuseAttempt). @defaultValue 1000 */
  maxAttemptStep?: number;
  /** How deep consumers' chains of emissions may go, and which assets may cycle. @defaultValue depth 16, no cycles */
  lineage?: LineagePolicy;
  /** How long a run may go without a request and no end before the catalog shows it stale. @defaultValue 24 hours */
  staleRunAfterMs?: number | undefined;
  /**
   * Refuse a missing file rather than create an empty store: for tools pointed at an existing server's
   * store (`oncebox token`), where a misspelt path would make a store no server reads. @defaultValue false
   */
  mustExist?: boolean;
}

/**
 * A store is created in a new file, or opened in one that holds a server store; any other SQLite file
 * (a job's outbox, an application's database) is refused as it is, with what it is, before anything is
 * written to it.
 */
function refuseOtherFiles(path: string, db: Database.Database): void {
  const tables = new Set((db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((row) => row.name));
  if (tables.size === 0 || (tables.has('events') && tables.has('dedupe'))) return;
  db.close();
  const what = tables.has('outbox') ? "a producer's outbox file (a job's), not a server store" : 'a SQLite database, but not an oncebox server store';
  throw new OptionsError('db', `--db ${path}: it is ${what}; give the server's own file (a new path makes a new, empty store)`);
}

/** The embedded dedupe store: one SQLite file, one writer transaction per request. */
export class SqliteDedupeStore implements DedupeStore {
  private readonly db: Database.Database;
  private readonly now: () => Date;
  private readonly policy: IngestPolicy;
  private readonly assets = new Set<string>();
  private readonly statements: ReturnType<typeof serverStatements>;
  private readonly ingestTransaction;
  private readonly groupTransaction;
  /** The requests waiting for the next group commit. */
  private waiting: WaitingIngest[] = [];
  /** @internal How many group commits this store made: a test tells from it that requests shared one. */
  groupCommits = 0;
  /** Removes up to `limit` streams idle since `before`, each with its sequence numbers and checkpoints, in one transaction. */
  private readonly compactStreams;
  readonly tokens: TokenRegistry;
  readonly stored = new EventSignal();
  readonly catalog: Catalog;
  private readonly catalogDb: SqliteCatalogDatabase;
  /** Removes up to `limit` events stamped before `cutoff`, and lowers the catalog's counts for them, in one transaction. */
  private readonly compactEvents;

  constructor(options: SqliteStoreOptions) {
    if (options.mustExist && !existsSync(options.path)) {
      throw new OptionsError('db', `--db ${options.path}: no such file; give the server's store (the --db its server runs with), or start that server once to create it`);
    }
    this.db = openSqlite(options.path, options.durability ?? 'full');
    refuseOtherFiles(options.path, this.db);
    this.now = options.now ?? (() => new Date());
    this.policy = ingestPolicy(options);
    migrateSqlite(this.db, serverSqliteMigrations, (found, known) => new SchemaTooNewError(`${options.path} (server store)`, found, known));
    this.tokens = new TokenRegistry(queryBuilder(this.db), this.now);
    this.statements = serverStatements(this.db);
    for (const row of this.statements.allAssets.all()) this.assets.add(row.name);
    this.compactStreams = this.db.transaction((before: string, limit: number) => {
      const idle = this.statements.idleStreams.all({ cutoff: before, limit });
      for (const stream of idle) {
        const key = { producer: stream.producer, runId: stream.run_id, task: stream.task };
        this.statements.forgetStreamSeqs.run(key);
        this.statements.forgetStreamCheckpoints.run(key);
        this.statements.forgetStreamFences.run(key);
        this.statements.forgetStream.run(key);
      }
      return idle.length;
    });
    this.catalogDb = new SqliteCatalogDatabase(this.db);
    this.catalog = new Catalog(this.catalogDb, this.now, options.staleRunAfterMs);
    this.compactEvents = this.db.transaction((cutoff: string, limit: number) => {
      const cursors = JSON.stringify(this.statements.oldEvents.all({ cutoff, limit }).map((row) => row.cursor));
      this.statements.keepRecords.run({ cursors });
      const removed = this.statements.removeEvents.all({ cursors });
      this.catalogDb.runSync(forgetRemoved(this.catalogDb, removed));
      return removed.length;
    });
    // A nested better-sqlite3 transaction is a savepoint: a request that throws undoes only its own writes.
    this.groupTransaction = this.db.transaction((group: readonly WaitingIngest[]) =>
      group.map((request): GroupOutcome => {
        try {
          return { results: this.ingestTransaction(request.stream, request.items, request.scope) };
        } catch (error) {
          return { error };
        }
      }),
    );
    this.ingestTransaction = this.db.transaction((stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[], scope: IngestScope) =>
      runIngestSync(
        ingestSteps({
          stream,
          items,
          now: this.now(),
          isRegistered: (asset) => this.assets.has(asset),
          scope,
          ...this.policy,
        }),
        this.stepHandler(stream, items),
      ),
    );
  }

  // Group commit: the requests that arrive while one event-loop turn runs wait for the next, and share
  // one transaction and one fsync, each in a savepoint of its own (one that fails undoes only itself).
  // Each is answered only once that transaction is durable.
  async ingest(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[], scope: IngestScope = TRUSTED_SCOPE): Promise<ItemResult[]> {
    const results = await new Promise<ItemResult[]>((resolve, reject) => {
      this.waiting.push({ stream, items, scope, resolve, reject });
      if (this.waiting.length === 1) setImmediate(() => this.commitGroup());
    });
    const assets = storedAssets(items, results);
    if (assets.size > 0) this.stored.notify(assets);
    return results;
  }

  /** Runs the waiting requests in one transaction, then answers each. */
  private commitGroup(): void {
    const group = this.waiting;
    this.waiting = [];
    let outcomes: GroupOutcome[];
    try {
      outcomes = this.groupTransaction.immediate(group);
    } catch (error) {
      for (const request of group) request.reject(error);
      return;
    }
    this.groupCommits++;
    answerGroup(group, outcomes);
  }

  /**
   * The reads and writes of one request's ingest, all inside its savepoint of the group's IMMEDIATE
   * transaction. It is long because it is a list, one handler per step the ingest asks for, each read on
   * its own; split, the steps of one request would scatter.
   */
  private stepHandler(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[]): StepHandler<false> {
    const s = this.statements;
    const ofAttempt = attemptOf(stream);
    const { producer } = stream;
    const places = new KeyPlaces(stream, items);
    // A key's record inside the window, wherever it may be filed: with its run's partition, or per producer.
    const findRecord = (key: string) => firstFound(places.of(key), (place) => s.findFiled.get({ producer, key, ...place }));
    const recordUnplaced = (refusals: readonly PositionOutcome[], clock: IngestClock) => {
      for (const { subject, ...refusal } of refusals) {
        s.insertRefusal.run({ ...ofAttempt, ...refusal, createdAt: clock.ms, asset: subject?.asset ?? null, partitionKey: subject?.partitionKey ?? null });
      }
    };
    return {
      position: ({ clock }) => {
        const epoch = s.epoch.get(ofAttempt)?.epoch;
        // The stream's last activity, for the compaction of streams idle past their retention.
        if (epoch !== undefined) s.touchStream.run({ ...ofAttempt, ts: clock.ts });
        return { epoch: epoch ?? 0, lastSeq: s.lastSeq.get(ofAttempt)?.last_seq ?? 0, fresh: epoch === undefined };
      },
      causes: ({ cursors }) => {
        const causes = new Map<number, CauseEvent>();
        for (const cursor of cursors) {
          const row = s.causeEvent.get({ cursor });
          if (row) causes.set(cursor, toCauseEvent(row));
        }
        return causes;
      },
      checkpointNames: () => new Set(s.streamCheckpointNames.all({ producer, runId: stream.runId, task: ofAttempt.task }).map((row) => row.name)),
      // The event row is its own dedupe record: claiming a key stores its event, filed with its run and
      // partition when the producer says the key is the run's alone, else per producer (key-places.ts).
      // The insert decides who is first among requests filing it in the same place; the other place, and
      // a record that outlived its event (kept by compaction), are looked at first. Looking and then
      // inserting is safe here: the group's transaction is IMMEDIATE, so no other writer runs between.
      claim: ({ claims, clock }) =>
        new Set(
          claims
            .filter((claim) => {
              const { filedAt, elsewhere } = places.claim(claim.event.item);
              return (
                s.findKeptRecord.get({ producer, key: claim.key }) === undefined &&
                s.findFiled.get({ producer, key: claim.key, ...elsewhere }) === undefined &&
                s.claimEvent.run(claimedEventRow(stream, claim, clock, filedAt)).changes === 1
              );
            })
            .map((claim) => claim.key),
        ),
      read: ({ seqs, keys }) => {
        const outcomes = new Map<number, RecordedOutcome>();
        for (const seq of seqs) {
          const row = s.findOutcome.get({ ...ofAttempt, seq });
          // Stryker disable next-line ConditionalExpression: an unset outcome and one set to undefined read the same
          if (row) outcomes.set(seq, row);
        }
        const records = new Map<string, DedupeRecord>();
        for (const key of keys) {
          const row = findRecord(key) ?? s.findKeptRecord.get({ producer, key });
          // A key inside the window always has its fingerprint (an event without one left the window at migration 012).
          if (row) records.set(key, { fingerprint: row.fingerprint!, eventId: row.event_id, ts: row.ts });
        }
        return { outcomes, records };
      },
      // The new events were stored when their keys were claimed.
      write: ({ writes, clock }) => {
        for (const { subject, ...outcome } of writes.outcomes) {
          s.insertOutcome.run({ ...ofAttempt, ...outcome, createdAt: clock.ms, asset: subject?.asset ?? null, partitionKey: subject?.partitionKey ?? null });
        }
        recordUnplaced(writes.unplaced, clock);
        for (const checkpoint of writes.revisions) s.reviseCheckpoint.run({ ...ofAttempt, ...checkpoint, ts: clock.ts });
        for (const checkpoint of writes.checkpoints) s.saveCheckpoint.run({ ...ofAttempt, ...checkpoint, ts: clock.ts });
        if (writes.lastSeq !== null) s.saveLastSeq.run({ ...ofAttempt, lastSeq: writes.lastSeq, ts: clock.ts });
        if (writes.epoch !== null) s.saveEpoch.run({ ...ofAttempt, attempt: writes.epoch, ts: clock.ts });
        if (writes.runOutcome !== null) s.saveRunOutcome.run({ ...ofAttempt, outcome: writes.runOutcome.outcome, outcomeAttempt: writes.runOutcome.attempt });
        if (writes.duplicates.length > 0) {
          for (const { key } of writes.duplicates) {
            // Counted where the key is: at one of its places (a claim never files it at both), or kept.
            if (!places.of(key).some((place) => s.countDuplicate.run({ producer, key, ...place }).changes > 0)) s.countKeptDuplicate.run({ producer, key });
          }
          s.countAttemptDuplicates.run({ ...ofAttempt, n: writes.duplicates.length });
          for (const [asset, n] of countsByAsset(writes.duplicates)) s.countAssetDuplicates.run({ asset, n });
        }
      },
      fenced: ({ items, fencedBy, clock }) => {
        s.recordFence.run({ ...ofAttempt, fencedBy, items, ts: clock.ts });
      },
      unplaced: ({ refusals, clock }) => recordUnplaced(refusals, clock),
    };
  }

  async listEvents(query: EventQuery): Promise<EventPage> {
    const { after, limit } = query;
    const rows =
      query.asset !== undefined
        ? this.statements.eventsByAsset.all({ asset: query.asset, after, limit })
        : query.assets !== undefined
          ? this.statements.eventsOfAssets.all({ assets: JSON.stringify(query.assets), after, limit })
          : this.statements.eventsAll.all({ after, limit });
    const events = rows.map(toStoredEvent);
    return { events, next: events.at(-1)?.cursor ?? query.after };
  }

  async streamState(producer: string, runId: string, task: string | null): Promise<StreamState | undefined> {
    const params = streamOf(producer, runId, task);
    const attempts = this.statements.streamAttempts.all(params).map((row) => ({ attempt: row.attempt, lastSeq: row.last_seq }));
    if (attempts.length === 0) return undefined;
    // Built from entries, not by assignment: a checkpoint named __proto__ is an entry like any other.
    const checkpoints: Record<string, unknown> = Object.fromEntries(this.statements.streamCheckpoints.all(params).map((row) => [row.name, JSON.parse(row.value)]));
    // A stream that took positions has its epoch row: the first delivery of an attempt writes both.
    return { producer, runId, task, epoch: this.statements.epoch.get(params)!.epoch, attempts, checkpoints };
  }

  async tasksOfRun(producer: string, runId: string, limit: number): Promise<(string | null)[]> {
    return this.statements.tasksOfRun.all({ producer, runId, limit }).map((row) => (row.task === '' ? null : row.task));
  }

  async claimAttempt(producer: string, runId: string, task: string | null, claim: AttemptClaim, scope: Pick<IngestScope, 'openStream'> = {}): Promise<ClaimDecision> {
    const stream = streamOf(producer, runId, task);
    return this.db
      .transaction(() => {
        const epoch = this.statements.epoch.get(stream)?.epoch;
        if (epoch === undefined) scope.openStream?.();
        const decision = decideClaim(epoch ?? 0, claim, this.policy.maxAttemptStep);
        if ('granted' in decision) this.statements.saveEpoch.run({ ...stream, attempt: decision.granted, ts: this.now().toISOString() });
        return decision;
      })
      .immediate();
  }

  async registerAsset(name: string): Promise<{ created: boolean }> {
    const created = this.statements.insertAsset.run({ name, createdAt: this.now().toISOString() }).changes === 1;
    this.assets.add(name);
    return { created };
  }

  async sizes(): Promise<StoreSizes> {
    return { events: this.statements.countEvents.get()!.n, dedupeRecords: this.statements.countKeys.get()!.n + this.statements.countKeptRecords.get()!.n };
  }

  async listAssets(): Promise<string[]> {
    return this.statements.allAssets.all().map((row) => row.name);
  }

  async compact(policy: RetentionPolicy): Promise<CompactionResult> {
    const now = this.now().getTime();
    const limit = policy.batchSize;
    const drain = <Cutoff>(statement: Prepared<{ cutoff: Cutoff; limit: number }, unknown>, cutoff: Cutoff) =>
      deleteInBatches(limit, () => statement.run({ cutoff, limit }).changes);
    // First the keys past the dedupe window: an event removed below keeps a record only inside it.
    const dedupeRecords = (await drain(this.statements.compactDedupe, now - policy.dedupeRetentionMs)) + (await drain(this.statements.releaseKeys, now - policy.dedupeRetentionMs));
    const outcomes = (await drain(this.statements.compactOutcomes, now - policy.dedupeRetentionMs)) + (await drain(this.statements.compactRefusals, now - policy.dedupeRetentionMs));
    const eventCutoff = policy.eventRetentionMs === null ? null : new Date(now - policy.eventRetentionMs).toISOString();
    const events = eventCutoff === null ? 0 : await deleteInBatches(limit, () => this.compactEvents.immediate(eventCutoff, limit));
    const idleBefore = new Date(now - policy.streamRetentionMs).toISOString();
    const streams = await deleteInBatches(limit, () => this.compactStreams.immediate(idleBefore, limit));
    return { dedupeRecords, events, outcomes, streams };
  }

  async close(): Promise<void> {
    this.stored.close();
    await this.catalogDb.close();
    this.db.close(); // closing twice is harmless
  }
}
