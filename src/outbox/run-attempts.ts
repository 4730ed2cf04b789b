import { FencedError } from '../protocol/errors.js';
import type { OutboxFile } from './outbox-file.js';

/** One run's stream, as the outbox file keys it: task is '' for a workflow-level run. */
export interface RunKey {
  runId: string;
  task: string;
}

/** Which attempt of which run was fenced, and by which later attempt. */
export interface Fence {
  runId: string;
  task: string | null;
  attempt: number;
  by: number;
}

/**
 * What an outbox file knows about the attempts of each run, and the rule it keeps with it: once attempt
 * N of a run has opened the file, or the server has said attempt N delivered, no older attempt of that
 * run may commit to the file. The check runs inside every commit's transaction, so a zombie on the same
 * machine cannot slip a commit in after its retry opened the file.
 * @internal
 */
export class RunAttempts {
  constructor(private readonly file: OutboxFile) {}

  /** The attempt that supersedes `attempt` of this run in this file, if any. Call it inside a transaction. */
  supersededBy(run: RunKey, attempt: number): { by: number; how: 'opened' | 'delivered' } | undefined {
    const row = this.file.statements.getRun.get({ ...run });
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
    return this.file.db
      .transaction(() => {
        const s = this.file.statements;
        this.assertCurrent(run, attempt);
        // max() always returns one row; its value is null when there is none.
        const lastWriter = s.highestAttemptWithRows.get({ ...run })!.attempt ?? undefined;
        const opened = s.getRun.get({ ...run })?.opened_by;
        if ((opened ?? 0) >= attempt) return { lastWriter, adopted: 0 };
        s.openRun.run({ ...run, attempt });
        // A later attempt after a failure for good: the run is tried again after all, and what that
        // failure discarded is held again for the success this attempt may make.
        this.file.lifecycle.holdDiscardedAgain.run({ ...run });
        let seq = s.lastSeq.get({ ...run, attempt })!.last ?? 0;
        const rows = s.undeliveredOfOlderAttempts.all({ ...run, attempt });
        for (const { id } of rows) s.adoptRow.run({ id, attempt, seq: ++seq });
        return { lastWriter, adopted: rows.length };
      })
      .immediate();
  }

  /** Records that the server fenced this run's attempts below `by`. Call it inside the relay's transaction. */
  recordFence(run: RunKey, by: number): void {
    this.file.statements.fenceRun.run({ ...run, by });
  }

  /** The fence on `attempt` of a run, if the server fenced it; for status and rejected receipts. */
  fenceOf(run: RunKey, attempt: number): Fence | undefined {
    const row = this.file.statements.getRun.get({ ...run });
    if (!row || row.fenced_by <= attempt) return undefined;
    return { runId: run.runId, task: run.task === '' ? null : run.task, attempt, by: row.fenced_by };
  }
}
