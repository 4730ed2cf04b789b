import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import { FencedError } from '../../protocol/errors.js';
import { params, prepare, queryBuilder, type Prepared } from '../../sqlite/statements.js';
import type { OfAttempt, OfRun, OutboxSchema } from './schema.js';
import type { LifecycleStatements } from './lifecycle-statements.js';
import { wireTask, type Fence, type RunKey } from '../run.js';

export type { Fence, RunKey } from '../run.js';

/** The statements of the runs table, and of the rows a newer attempt takes over: this module's own. */
function runStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const run = params<OfRun>();
  const ofRun = { run_id: run.runId, task: run.task };
  const attempt = params<OfAttempt>();
  const p = {
    fence: params<OfRun & { by: number }>(),
    adopt: params<{ id: number; attempt: number; seq: number }>(),
  };
  return {
    highestAttemptWithRows: prepare(db, run, q.selectFrom('outbox').select((eb) => eb.fn.max('attempt').as('attempt')).where((eb) => eb.and(ofRun))),
    getRun: prepare(db, run, q.selectFrom('runs').select(['opened_by', 'fenced_by']).where((eb) => eb.and(ofRun))),
    openRun: prepare(
      db,
      attempt,
      q
        .insertInto('runs')
        .values({ ...ofRun, opened_by: attempt.attempt })
        .onConflict((oc) => oc.columns(['run_id', 'task']).doUpdateSet({ opened_by: attempt.attempt })),
    ),
    fenceRun: prepare(
      db,
      p.fence,
      q
        .insertInto('runs')
        .values({ ...ofRun, opened_by: sql.lit(0), fenced_by: p.fence.by })
        .onConflict((oc) => oc.columns(['run_id', 'task']).doUpdateSet({ fenced_by: sql<number>`max(fenced_by, ${p.fence.by})` })),
    ),
    // In commit order: a newer attempt takes them over, renumbered in this order.
    undeliveredOfOlderAttempts: prepare(
      db,
      attempt,
      q
        .selectFrom('outbox')
        .select('id')
        .where((eb) => eb.and(ofRun))
        .where('attempt', '<', attempt.attempt)
        .where((eb) =>
          eb.or([eb('state', '=', sql.lit('pending')), eb.and([eb('state', '=', sql.lit('dead')), eb('dead_code', '=', sql.lit('fenced'))])]),
        )
        .orderBy('id'),
    ),
    adoptRow: prepare(
      db,
      p.adopt,
      q
        .updateTable('outbox')
        .set({
          attempt: p.adopt.attempt,
          seq: p.adopt.seq,
          state: sql.lit('pending'),
          dead_code: sql.lit(null),
          dead_reason: sql.lit(null),
          settled_at: sql.lit(null),
        })
        .where('id', '=', p.adopt.id),
    ),
  };
}

/**
 * What an outbox file knows about the attempts of each run, and the rule it keeps with it: once attempt
 * N of a run has opened the file, or the server has said attempt N delivered, no older attempt of that
 * run may commit to the file. The check runs inside every commit's transaction, so a zombie on the same
 * machine cannot slip a commit in after its retry opened the file.
 * @internal
 */
export class RunAttempts {
  private readonly statements: ReturnType<typeof runStatements>;

  /**
   * @param lastSeq the rows' own statement of an attempt's last sequence number: a newer attempt numbers
   *   the rows it takes over from there.
   */
  constructor(
    private readonly db: Database.Database,
    private readonly lifecycle: Pick<LifecycleStatements, 'holdDiscardedAgain'>,
    private readonly lastSeq: Prepared<OfAttempt, { last: number | null }>,
  ) {
    this.statements = runStatements(db);
  }

  /** What the file knows of a run: the highest attempt that opened it, and the attempt the server fenced below. */
  stateOf(run: RunKey): { opened_by: number; fenced_by: number } | undefined {
    return this.statements.getRun.get({ ...run });
  }

  /** The attempt that supersedes `attempt` of this run in this file, if any. Call it inside a transaction. */
  supersededBy(run: RunKey, attempt: number): { by: number; how: 'opened' | 'delivered' } | undefined {
    const row = this.statements.getRun.get({ ...run });
    if (!row) return undefined;
    if (row.opened_by > attempt && row.opened_by >= row.fenced_by) return { by: row.opened_by, how: 'opened' };
    if (row.fenced_by > attempt) return { by: row.fenced_by, how: 'delivered' };
    return undefined;
  }

  /** Throws FencedError when a later attempt of this run has opened the file or delivered. */
  assertCurrent(run: RunKey, attempt: number): void {
    const superseded = this.supersededBy(run, attempt);
    if (!superseded) return;
    const what = superseded.how === 'opened' ? 'has opened this outbox file' : 'has delivered to the server';
    throw new FencedError(
      attempt,
      superseded.by,
      `attempt ${attempt} of run ${run.runId} is fenced by attempt ${superseded.by}, which ${what}: ` +
        'this attempt is a zombie and must stop; its work is being done by the later attempt',
    );
  }

  /**
   * Opens `attempt` of a run on this file, in one transaction. An older attempt than one that opened the
   * file or delivered is refused with FencedError. A newer one becomes the run's attempt in this file and
   * takes over every row of older attempts that is not delivered: pending rows, and rows parked because
   * the server fenced their attempt. The file's checkpoint already counts them, so the new attempt will
   * not redo their batches: it must deliver them itself, in their commit order and as its own (numbered
   * from 1), where no fence of an older attempt can lose them. Emissions an older attempt's failure for
   * good discarded are held again: a run tried after that failure may succeed yet.
   *
   * @returns the highest attempt of the run that had rows in the file before this one took any over
   *   (undefined for none), and how many rows it took over.
   */
  open(run: RunKey, attempt: number): { lastWriter: number | undefined; adopted: number } {
    return this.db
      .transaction(() => {
        const s = this.statements;
        this.assertCurrent(run, attempt);
        // max() always returns one row; its value is null when there is none.
        const lastWriter = s.highestAttemptWithRows.get({ ...run })!.attempt ?? undefined;
        const opened = s.getRun.get({ ...run })?.opened_by;
        if ((opened ?? 0) >= attempt) return { lastWriter, adopted: 0 };
        s.openRun.run({ ...run, attempt });
        // A later attempt after a failure for good: the run is tried again after all, and what that
        // failure discarded is held again for the success this attempt may make.
        this.lifecycle.holdDiscardedAgain.run({ ...run });
        let seq = this.lastSeq.get({ ...run, attempt })!.last ?? 0;
        const rows = s.undeliveredOfOlderAttempts.all({ ...run, attempt });
        for (const { id } of rows) s.adoptRow.run({ id, attempt, seq: ++seq });
        return { lastWriter, adopted: rows.length };
      })
      .immediate();
  }

  /** Records that the server fenced this run's attempts below `by`. Call it inside the relay's transaction. */
  recordFence(run: RunKey, by: number): void {
    this.statements.fenceRun.run({ ...run, by });
  }

  /** The fence on `attempt` of a run, if the server fenced it; for status and rejected receipts. */
  fenceOf(run: RunKey, attempt: number): Fence | undefined {
    const row = this.statements.getRun.get({ ...run });
    if (!row || row.fenced_by <= attempt) return undefined;
    return { runId: run.runId, task: wireTask(run.task), attempt, by: row.fenced_by };
  }
}
