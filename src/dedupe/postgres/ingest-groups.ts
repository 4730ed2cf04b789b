import type pg from 'pg';
import type { ItemResult } from '../../protocol/wire.js';
import { answerGroup, type GroupOutcome, type WaitingIngest } from '../ingest/group-commit.js';
import type { IngestSteps } from '../ingest/steps.js';
import { runIngest } from '../ingest/steps.js';
import { streamOf } from '../tables.js';
import { inTransaction, isTransient, runStatement } from './connection.js';
import type { IngestGroupState, PostgresIngestSteps } from './ingest-steps.js';
import type { ingestStatements } from './statements.js';

/** At most this many requests share one transaction, so that one group's answers are not held up long. */
const MAX_GROUP = 64;

/**
 * Group commit on PostgreSQL. The requests that arrive while an instance's group transaction is busy
 * wait for the next, and share it and its one fsync, each answered only once it has committed. A group
 * runs first without savepoints, as most have no failure; if a request fails, the group runs again
 * with a savepoint each, so that the failure undoes only that request. Requests that store events
 * commit one after another anyway, under the cursors' lock (PostgresIngestSteps): without sharing, many
 * small requests at once would wait for one fsync each.
 *
 * An instance runs one group transaction at a time. A group of several locks the rows of its streams
 * first, in one order, and then the cursors' lock, which it keeps to its commit: holding the cursors, it
 * never waits for a stream that a transaction waiting for the cursors holds. A group of one runs as a
 * request alone does, taking the cursors' lock at its claim.
 * @internal
 */
export class PostgresIngestGroups {
  private waiting: WaitingIngest[] = [];
  private committing = false;
  /** Transactions committed so far, for tests: requests that shared one count once. */
  commits = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly statements: ReturnType<typeof ingestStatements>,
    private readonly steps: PostgresIngestSteps,
    private readonly cursorLock: string,
    /** The ingest steps of one request, planned when its turn in the transaction comes. */
    private readonly plan: (request: WaitingIngest) => IngestSteps,
  ) {}

  ingest(request: Omit<WaitingIngest, 'resolve' | 'reject'>): Promise<ItemResult[]> {
    return new Promise<ItemResult[]>((resolve, reject) => {
      this.waiting.push({ ...request, resolve, reject });
      if (!this.committing) void this.commitGroups();
    });
  }

  private async commitGroups(): Promise<void> {
    this.committing = true;
    // The requests that arrive in this event-loop turn join the first group.
    await new Promise((resolve) => setImmediate(resolve));
    while (this.waiting.length > 0) {
      const group = this.waiting.splice(0, MAX_GROUP);
      let outcomes: GroupOutcome[];
      try {
        // Without savepoints first, two round trips fewer a request; if one request fails, the group
        // runs again with a savepoint each, so that the failure undoes only that request. (A stream the
        // first run opened is then counted twice against its token's rate of new streams.)
        outcomes = await inTransaction(this.pool, (client) => this.groupTransaction(client, group, false)).catch((error: unknown) => {
          if (!(error instanceof RequestFailed)) throw error;
          return inTransaction(this.pool, (client) => this.groupTransaction(client, group, true));
        });
      } catch (error) {
        for (const request of group) request.reject(error);
        continue;
      }
      this.commits++;
      answerGroup(group, outcomes);
    }
    this.committing = false;
  }

  private async groupTransaction(client: pg.PoolClient, group: readonly WaitingIngest[], savepoints: boolean): Promise<GroupOutcome[]> {
    if (group.length === 1) return [{ results: await runIngest(this.plan(group[0]!), this.steps.stepHandler(client, group[0]!.stream, group[0]!.items)) }];
    // Each stream once, whatever attempts of it the group holds.
    const streams = [...new Map(group.map(({ stream }) => streamOf(stream.producer, stream.runId, stream.task)).map((s) => [JSON.stringify(s), s])).values()];
    await runStatement(client, this.statements.lockStreams, {
      producers: streams.map((s) => s.producer),
      runIds: streams.map((s) => s.runId),
      tasks: streams.map((s) => s.task),
    });
    await runStatement(client, this.statements.lockCursors, { key: this.cursorLock });
    const outcomes: GroupOutcome[] = [];
    const stored: string[] = [];
    for (const request of group) {
      const state: IngestGroupState = { stored: [] };
      if (savepoints) await client.query('SAVEPOINT ingest');
      try {
        outcomes.push({ results: await runIngest(this.plan(request), this.steps.stepHandler(client, request.stream, request.items, state)) });
        if (savepoints) await client.query('RELEASE SAVEPOINT ingest');
        stored.push(...state.stored);
      } catch (error) {
        // A deadlock or serialization failure: the whole transaction runs again (inTransaction).
        if (isTransient(error)) throw error;
        if (!savepoints) throw new RequestFailed();
        await client.query('ROLLBACK TO SAVEPOINT ingest');
        outcomes.push({ error });
      }
    }
    // One notification for the group, sent when it commits.
    if (stored.length > 0) await this.steps.notifyStored(client, stored);
    return outcomes;
  }
}

/** A request of a group run without savepoints failed: the group runs again with them. */
class RequestFailed extends Error {}
