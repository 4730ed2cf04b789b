import type pg from 'pg';
import type { StreamIdentity } from '../../protocol/wire.js';
import type { DedupeRecord, KeyClaim, RecordedOutcome } from '../ingest/resolve.js';
import type { IngestClock, StepHandler } from '../ingest/steps.js';
import { notifyPayload } from '../stored-assets.js';
import { attemptOf, lineageColumns, toCauseEvent } from '../tables.js';
import { runStatement } from './connection.js';
import type { ingestStatements } from './statements.js';

/**
 * @internal What the ingest steps (ingest/steps.ts) ask of PostgreSQL: each read and write one round
 * trip inside the request's transaction, on the statements prepared once per connection.
 */
export class PostgresIngestSteps {
  constructor(
    private readonly statements: ReturnType<typeof ingestStatements>,
    /** The NOTIFY channel that wakes waiting readers on every instance. */
    private readonly channel: string,
  ) {}

  /** The reads and writes of one request's ingest, each one round trip inside its transaction. */
  stepHandler(client: pg.PoolClient, stream: StreamIdentity): StepHandler<true> {
    const run = this.statements;
    const ofAttempt = attemptOf(stream);
    const { producer } = stream;
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
      claim: async ({ claims, clock }) => {
        const claimed = await this.claimEvents(client, stream, claims, clock);
        // A record that outlived its event holds its key: the event just stored for it goes again.
        const kept = claimed.size === 0 ? [] : await runStatement(client, run.keptRecords, { producer, keys: [...claimed.keys()] });
        if (kept.length > 0) {
          await runStatement(client, run.unclaimEvents, { eventIds: kept.map((row) => claimed.get(row.key)!) });
          for (const row of kept) claimed.delete(row.key);
        }
        return new Set(claimed.keys());
      },
      read: async ({ seqs, keys }) => {
        const outcomes = new Map<number, RecordedOutcome>();
        if (seqs.length > 0) {
          for (const { seq, ...outcome } of await runStatement(client, run.recordedOutcomes, { ...ofAttempt, seqs: [...seqs] })) outcomes.set(seq, outcome);
        }
        const records = new Map<string, DedupeRecord>();
        if (keys.length > 0) {
          for (const row of await runStatement(client, run.readRecords, { producer, keys: [...keys] })) {
            records.set(row.key, { fingerprint: row.fingerprint, eventId: row.event_id, ts: row.ts });
          }
        }
        return { outcomes, records };
      },
      write: (step) => this.write(client, stream, step),
      fenced: async ({ items, fencedBy, clock }) => {
        await runStatement(client, run.recordFence, { ...ofAttempt, fencedBy, items, ts: clock.ts });
      },
    };
  }

  /**
   * Stores the claimed keys' events, insert first: those whose key no stored event holds are this
   * request's. Inserted in key order, so that two requests claiming the same keys take their locks in the
   * same order and one waits for the other rather than both for each other (a deadlock); their ids are
   * reserved first, in the request's order, which is the order the sequencer gives cursors in.
   * @returns each key claimed, with its event id.
   */
  private async claimEvents(client: pg.PoolClient, stream: StreamIdentity, claims: readonly KeyClaim[], clock: IngestClock): Promise<Map<string, string>> {
    const run = this.statements;
    const ids = (await runStatement(client, run.reserveEventIds, { n: claims.length })).map((row) => Number(row.id)).sort((a, b) => a - b);
    const ordered = claims.map((claim, i) => ({ claim, id: ids[i]! }));
    ordered.sort((a, b) => (a.claim.key < b.claim.key ? -1 : a.claim.key > b.claim.key ? 1 : 0));
    const items = ordered.map(({ claim }) => claim.event.item);
    const lineages = ordered.map(({ claim }) => lineageColumns(claim.event.lineage));
    const rows = await runStatement(client, run.claimEvents, {
      ids: ordered.map(({ id }) => id),
      fingerprints: ordered.map(({ claim }) => claim.fingerprint),
      eventIds: ordered.map(({ claim }) => claim.eventId),
      keys: items.map((item) => item.key),
      assets: items.map((item) => item.payload.asset),
      partitionKeys: items.map((item) => item.payload.partitionKey ?? null),
      partitionDates: items.map((item) => item.payload.partitionDate ?? null),
      extras: items.map((item) => item.payload.extra ?? null),
      seqs: items.map((item) => item.seq),
      traceContexts: items.map((item) => (item.trace === undefined ? null : JSON.stringify(item.trace))),
      causedBy: lineages.map((l) => l.causedBy),
      depths: lineages.map((l) => l.depth),
      lineages: lineages.map((l) => l.lineage),
      createdAt: clock.ms,
      ts: clock.ts,
      producer: stream.producer,
      workflow: stream.workflow,
      runId: stream.runId,
      task: stream.task,
      attempt: stream.attempt,
    });
    const eventIds = new Map(claims.map((claim) => [claim.key, claim.eventId]));
    return new Map(rows.map((row) => [row.key, eventIds.get(row.key)!]));
  }

  /** Stores what the resolve step decided: the notification of new events, outcomes, checkpoints, position, epoch. */
  private async write(client: pg.PoolClient, stream: StreamIdentity, { writes, clock }: Parameters<StepHandler<true>['write']>[0]): Promise<void> {
    const run = this.statements;
    const ofAttempt = attemptOf(stream);
    const { events, outcomes } = writes;
    // The new events were stored when their keys were claimed.
    if (events.length > 0) {
      await runStatement(client, run.notifyStored, { channel: this.channel, payload: notifyPayload(events.map((e) => e.item.payload.asset)) });
    }
    if (outcomes.length > 0) {
      await runStatement(client, run.recordOutcomes, {
        ...ofAttempt,
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
    for (const checkpoint of writes.revisions) await runStatement(client, run.reviseCheckpoint, { ...ofAttempt, ...checkpoint, ts: clock.ts });
    for (const checkpoint of writes.checkpoints) await runStatement(client, run.saveCheckpoint, { ...ofAttempt, ...checkpoint, ts: clock.ts });
    if (writes.lastSeq !== null) await runStatement(client, run.saveLastSeq, { ...ofAttempt, lastSeq: writes.lastSeq, ts: clock.ts });
    if (writes.epoch !== null) await runStatement(client, run.raiseEpoch, { ...ofAttempt, epoch: writes.epoch, ts: clock.ts });
    if (writes.runOutcome !== null) await runStatement(client, run.saveRunOutcome, { ...ofAttempt, outcome: writes.runOutcome });
    if (writes.duplicates.length > 0) {
      // In key order, like the claims: two requests counting the same keys lock them in the same order.
      const sorted = [...writes.duplicates].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      await runStatement(client, run.countDuplicates, { ...ofAttempt, keys: sorted.map((d) => d.key), assets: sorted.map((d) => d.asset) });
    }
  }
}
