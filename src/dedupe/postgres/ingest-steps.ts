import type pg from 'pg';
import type { StreamIdentity } from '../../protocol/wire.js';
import type { CheckedItem, InvalidItem } from '../item-check.js';
import { KeyPlaces } from '../key-places.js';
import type { DedupeRecord, PositionOutcome, RecordedOutcome } from '../ingest/resolve.js';
import type { IngestClock, StepHandler } from '../ingest/steps.js';
import { notifyPayload } from '../stored-assets.js';
import { attemptOf, lineageColumns, toCauseEvent } from '../tables.js';
import { runStatement } from './connection.js';
import type { ingestStatements } from './statements.js';

/**
 * @internal A request's part in a group transaction (PostgresIngestGroups), which took the cursors' lock
 * at its start: the assets of the events the request stored, for the group's one notification.
 */
export interface IngestGroupState {
  stored: string[];
}

/**
 * @internal What the ingest steps (ingest/steps.ts) ask of PostgreSQL: each read and write one round
 * trip inside the request's transaction, on the statements prepared once per connection.
 */
export class PostgresIngestSteps {
  constructor(
    private readonly statements: ReturnType<typeof ingestStatements>,
    /** The NOTIFY channel that wakes waiting readers on every instance. */
    private readonly channel: string,
    /** The advisory lock under which events take their cursors, the same on every instance of the schema. */
    private readonly cursorLock: string,
  ) {}

  /**
   * The reads and writes of one request's ingest, each one round trip inside its transaction. In a
   * group (PostgresIngestGroups), which holds the cursors' lock from its start, the claim does not take
   * it again, and the assets of the events stored go to `stored` for the group's one notification.
   */
  stepHandler(client: pg.PoolClient, stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[], group?: IngestGroupState): StepHandler<true> {
    const run = this.statements;
    const ofAttempt = attemptOf(stream);
    const { producer } = stream;
    const places = new KeyPlaces(stream, items);
    return {
      position: async ({ clock }) => {
        // One statement creates the stream or marks it active now, and takes its row lock either way.
        const [locked] = await runStatement(client, run.openStream, { ...ofAttempt, ts: clock.ts });
        const [seqRow] = await runStatement(client, run.lastSeq, ofAttempt);
        return { epoch: locked!.epoch, lastSeq: seqRow?.last_seq ?? 0, fresh: locked!.fresh };
      },
      causes: async ({ cursors }) => {
        const rows = await runStatement(client, run.causeEvents, { cursors: [...cursors] });
        return new Map(rows.map((row) => [Number(row.cursor), toCauseEvent(row)]));
      },
      checkpointNames: async () => {
        const rows = await runStatement(client, run.checkpointNames, { producer, runId: stream.runId, task: ofAttempt.task });
        return new Set(rows.map((row) => row.name));
      },
      // The event row is its own dedupe record: claiming a key stores its event, with the next cursor,
      // filed with its run and partition when the producer says the key is the run's alone, else per
      // producer (key-places.ts). Under the cursors' lock, held from here to the commit: requests that store events commit in
      // cursor order (G14), and no two claim at once, so claims in any key order cannot deadlock.
      claim: async ({ claims, clock }) => {
        if (group === undefined) await runStatement(client, run.lockCursors, { key: this.cursorLock });
        const lineages = claims.map((c) => lineageColumns(c.event.lineage));
        const items = claims.map((c) => c.event.item);
        const rows = await runStatement(client, run.claimEvents, {
          eventIds: claims.map((c) => c.eventId),
          keys: claims.map((c) => c.key),
          fingerprints: claims.map((c) => c.fingerprint),
          slot: places.slot,
          runPartitions: claims.map((c) => places.ofRun(c.key).partition),
          ofRun: items.map((item) => item.keyOfRun === true),
          createdAt: clock.ms,
          assets: items.map((item) => item.payload.asset),
          partitionKeys: items.map((item) => item.payload.partitionKey ?? null),
          partitionDates: items.map((item) => item.payload.partitionDate ?? null),
          extras: items.map((item) => item.payload.extra ?? null),
          seqs: items.map((item) => item.seq),
          traceContexts: items.map((item) => (item.trace === undefined ? null : JSON.stringify(item.trace))),
          causedBy: lineages.map((l) => l.causedBy),
          depths: lineages.map((l) => l.depth),
          lineages: lineages.map((l) => l.lineage),
          ts: clock.ts,
          producer,
          workflow: stream.workflow,
          runId: stream.runId,
          task: stream.task,
          attempt: stream.attempt,
        });
        return new Set(rows.map((row) => row.key));
      },
      read: async ({ seqs, keys }) => {
        const outcomes = new Map<number, RecordedOutcome>();
        if (seqs.length > 0) {
          for (const { seq, ...outcome } of await runStatement(client, run.recordedOutcomes, { ...ofAttempt, seqs: [...seqs] })) outcomes.set(seq, outcome);
        }
        const records = new Map<string, DedupeRecord>();
        if (keys.length > 0) {
          const partitions = keys.map((key) => places.ofRun(key).partition);
          const rows = await runStatement(client, run.readRecords, { producer, keys: [...keys], slot: places.slot, partitions });
          // Ranked: a key's first record is the one at the first place that has it.
          for (const row of rows) {
            if (!records.has(row.key)) records.set(row.key, { fingerprint: row.fingerprint, eventId: row.event_id, ts: row.ts });
          }
        }
        return { outcomes, records };
      },
      write: (step) => this.write(client, stream, places, step, group),
      fenced: async ({ items, fencedBy, clock }) => {
        await runStatement(client, run.recordFence, { ...ofAttempt, fencedBy, items, ts: clock.ts });
      },
      unplaced: ({ refusals, clock }) => this.record(client, run.recordRefusals, stream, refusals, clock),
    };
  }

  /** Items' outcomes, into stream_outcomes (at their positions) or stream_refusals (beside them), in one statement. */
  private async record(
    client: pg.PoolClient,
    statement: ReturnType<typeof ingestStatements>['recordOutcomes'],
    stream: StreamIdentity,
    outcomes: readonly PositionOutcome[],
    clock: IngestClock,
  ): Promise<void> {
    if (outcomes.length === 0) return;
    await runStatement(client, statement, {
      ...attemptOf(stream),
      seqs: outcomes.map((o) => o.seq),
      keys: outcomes.map((o) => o.key),
      statuses: outcomes.map((o) => o.status),
      codes: outcomes.map((o) => o.code),
      details: outcomes.map((o) => o.detail),
      fields: outcomes.map((o) => o.field),
      assets: outcomes.map((o) => o.subject?.asset ?? null),
      partitionKeys: outcomes.map((o) => o.subject?.partitionKey ?? null),
      createdAt: clock.ms,
    });
  }

  /** Stores what the resolve step decided: the events' notification, outcomes, checkpoints, position, epoch. */
  private async write(
    client: pg.PoolClient,
    stream: StreamIdentity,
    places: KeyPlaces,
    { writes, clock }: Parameters<StepHandler<true>['write']>[0],
    group?: IngestGroupState,
  ): Promise<void> {
    const run = this.statements;
    const ofAttempt = attemptOf(stream);
    const { events } = writes;
    await this.record(client, run.recordOutcomes, stream, writes.outcomes, clock);
    await this.record(client, run.recordRefusals, stream, writes.unplaced, clock);
    for (const checkpoint of writes.revisions) await runStatement(client, run.reviseCheckpoint, { ...ofAttempt, ...checkpoint, ts: clock.ts });
    for (const checkpoint of writes.checkpoints) await runStatement(client, run.saveCheckpoint, { ...ofAttempt, ...checkpoint, ts: clock.ts });
    if (writes.lastSeq !== null) await runStatement(client, run.saveLastSeq, { ...ofAttempt, lastSeq: writes.lastSeq, ts: clock.ts });
    if (writes.epoch !== null) await runStatement(client, run.raiseEpoch, { ...ofAttempt, epoch: writes.epoch, ts: clock.ts });
    if (writes.runOutcome !== null) await runStatement(client, run.saveRunOutcome, { ...ofAttempt, outcome: writes.runOutcome.outcome, outcomeAttempt: writes.runOutcome.attempt });
    if (writes.duplicates.length > 0) {
      // In key order: two requests counting the same keys (one of them perhaps without the cursors' lock,
      // having claimed nothing) lock them in the same order.
      const sorted = [...writes.duplicates].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      await runStatement(client, run.countDuplicates, {
        ...ofAttempt,
        keys: sorted.map((d) => d.key),
        assets: sorted.map((d) => d.asset),
        slot: places.slot,
        partitions: sorted.map((d) => places.ofRun(d.key).partition),
      });
    }
    // The new events were stored when their keys were claimed; readers elsewhere hear of them at commit.
    const assets = events.map((e) => e.item.payload.asset);
    if (group !== undefined) group.stored.push(...assets);
    else if (assets.length > 0) await this.notifyStored(client, assets);
  }

  /** Wakes readers on every instance once the transaction commits (and not at all if it rolls back). */
  async notifyStored(client: pg.PoolClient, assets: readonly string[]): Promise<void> {
    await runStatement(client, this.statements.notifyStored, { channel: this.channel, payload: notifyPayload(assets) });
  }
}
