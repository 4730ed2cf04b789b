import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import { FencedError, ProducerErrorCode, RejectionCode } from '../../protocol/errors.js';
import { isWellFormedNotice } from '../../protocol/lifecycle.js';
import { params, prepare, queryBuilder } from '../../sqlite/statements.js';
import type { OfAttempt, OutboxSchema } from './schema.js';
import type { TerminalStatements } from './terminal-statements.js';
import type { FileMeta } from './meta.js';
import { nextSeq, type RowStatements } from './rows.js';
import { runKeyOf, wireTask, type Fence, type RunKey } from '../run.js';

/** The statements of the runs table: this module's own. The rows it takes over or parks are the rows' statements'. */
function runStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const run = params<RunKey>();
  const ofRun = { run_id: run.runId, task: run.task };
  const attempt = params<OfAttempt>();
  const fence = params<RunKey & { by: number }>();
  return {
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
      fence,
      q
        .insertInto('runs')
        .values({ ...ofRun, opened_by: sql.lit(0), fenced_by: fence.by })
        .onConflict((oc) => oc.columns(['run_id', 'task']).doUpdateSet({ fenced_by: sql<number>`max(fenced_by, ${fence.by})` })),
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
   * @param rows the outbox table's statements: a newer attempt takes older attempts' rows over, and a
   *   fence parks the fenced attempt's rows.
   * @param meta the file's metadata: the producer it belongs to, which a lifecycle notice's key derives from.
   */
  constructor(
    private readonly db: Database.Database,
    private readonly terminal: Pick<TerminalStatements, 'holdDiscardedAgain'>,
    private readonly rows: RowStatements,
    private readonly meta: Pick<FileMeta, 'read'>,
  ) {
    this.statements = runStatements(db);
  }

  /** The highest attempt of a run this file has seen: opened here, or said by the server to have delivered. */
  highestSeen(run: RunKey): number {
    const row = this.statements.getRun.get({ ...run });
    return Math.max(row?.opened_by ?? 0, row?.fenced_by ?? 0);
  }

  /** The attempt a run's rows belong to now: the highest that opened this file, or `otherwise` when none did. */
  currentAttempt(run: RunKey, otherwise: number): number {
    // A run whose fence was recorded before any attempt opened this file has opened_by 0: none did.
    const opened = this.statements.getRun.get({ ...run })?.opened_by ?? 0;
    return opened > 0 ? opened : otherwise;
  }

  /** Whether the server has said a later attempt than the newest to open this file has delivered. */
  isFencedHere(run: RunKey): boolean {
    const row = this.statements.getRun.get({ ...run });
    return row !== undefined && row.fenced_by > row.opened_by;
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
    const what = superseded.how === 'opened' ? 'has opened this outbox file' : 'has claimed this run at the server or delivered to it';
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
        const lastWriter = this.rows.highestAttempt.get({ ...run })!.attempt ?? undefined;
        const opened = s.getRun.get({ ...run })?.opened_by;
        if ((opened ?? 0) >= attempt) return { lastWriter, adopted: 0 };
        s.openRun.run({ ...run, attempt });
        // A later attempt after a failure for good: the run is tried again after all, and what that
        // failure discarded is held again for the success this attempt may make.
        this.terminal.holdDiscardedAgain.run({ ...run });
        let seq = nextSeq(this.rows, { ...run, attempt });
        // A notice a 0.1.0 server refused goes again only when it says what a terminal commit writes: one
        // refused for its content would be refused again, at every attempt that opens the file.
        const producer = this.meta.read('producer');
        const rows = this.rows.undeliveredOfOlderAttempts
          .all({ ...run, attempt })
          .filter((row) => row.dead_code !== RejectionCode.InvalidItem || (producer !== undefined && isWellFormedNotice(producer, row)));
        for (const { id } of rows) this.rows.takeOver.run({ id, attempt, seq: seq++ });
        return { lastWriter, adopted: rows.length };
      })
      .immediate();
  }

  /** Records that the server fenced this run's attempts below `by`. Call it inside the relay's transaction. */
  recordFence(run: RunKey, by: number): void {
    this.statements.fenceRun.run({ ...run, by });
  }

  /**
   * The server fenced `fence.attempt`: records the fence, and parks every pending row of that attempt at
   * once, as dead with code `fenced`, since none of them may be delivered any more (the newer attempt
   * takes them over when it opens this file). Call it inside the relay's transaction.
   * @returns the parked rows' ids, and the reason they carry.
   */
  parkFenced(fence: Fence, now: number): { parked: number[]; reason: string } {
    const run = runKeyOf(fence);
    this.recordFence(run, fence.by);
    const reason = `fenced by attempt ${fence.by}`;
    const parked = this.rows.parkStream.all({ ...run, attempt: fence.attempt, code: ProducerErrorCode.Fenced, reason, now });
    return { parked: parked.map((row) => row.id), reason };
  }

  /** The fence on `attempt` of a run, if the server fenced it; for status and rejected receipts. */
  fenceOf(run: RunKey, attempt: number): Fence | undefined {
    const row = this.statements.getRun.get({ ...run });
    if (!row || row.fenced_by <= attempt) return undefined;
    return { runId: run.runId, task: wireTask(run.task), attempt, by: row.fenced_by };
  }
}
