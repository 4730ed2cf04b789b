import { DeadLetterError, ProducerErrorCode } from '../../protocol/errors.js';
import { isWellFormedNotice } from '../../protocol/lifecycle.js';
import { deadRowRemedy } from '../../protocol/rejection-fixes.js';
import { params, prepare, queryBuilder } from '../../sqlite/statements.js';
import { deathOf, nextSeq } from './rows.js';
import type { OutboxFile } from './outbox-file.js';
import type { OutboxRow, OutboxSchema } from './schema.js';
import { wireTask } from '../run.js';

/** A dead row: an emission the server refused for good, or that a fence parked. */
export interface DeadLetter {
  id: number;
  key: string;
  kind: string;
  asset: string;
  partitionKey: string | null;
  partitionDate: string | null;
  extra: unknown;
  workflow: string;
  runId: string;
  task: string | null;
  attempt: number;
  seq: number;
  code: string;
  reason: string;
  committedAt: string;
  deadSince: string | null;
}

export interface RetriedLetter {
  id: number;
  key: string;
  /** The row's new place: the end of the file, as the run's current attempt. */
  newId: number;
  attempt: number;
  seq: number;
}

export type Selection = readonly number[] | 'all';

/**
 * Dead rows, and what can be done about them: send again once the cause is fixed, or discard. Both
 * are recorded in the file (`dead_letter_actions`).
 *
 * Sending again is exactly once: the row keeps its key and payload and moves to the end of the file as
 * a pending row of the run's current attempt, at that attempt's next sequence number. The server's
 * recorded rejection belongs to the old position (attempt and seq) and stays there; the key itself was
 * never stored, since a rejected item writes no dedupe record, so the server takes it now as a new event,
 * once, and answers any later resend of it with the same receipt.
 */
export class DeadLetters {
  private readonly statements;
  private readonly retryTransaction;
  private readonly discardTransaction;

  constructor(private readonly file: OutboxFile) {
    const q = queryBuilder<OutboxSchema>(file.db);
    const db = file.db;
    const action = params<{ key: string; action: 'retried' | 'discarded'; at: number; code: string | null; reason: string | null; note: string; row: string }>();
    this.statements = {
      record: prepare(
        db,
        action,
        q.insertInto('dead_letter_actions').values({
          row_key: action.key,
          action: action.action,
          at: action.at,
          dead_code: action.code,
          dead_reason: action.reason,
          note: action.note,
          row: action.row,
        }),
      ),
    };
    this.retryTransaction = db.transaction((selection: Selection, note: string) => this.retryRows(selection, note));
    this.discardTransaction = db.transaction((selection: Selection, note: string) => this.discardRows(selection, note));
  }

  list(): DeadLetter[] {
    return this.file.rows.allDeadRows.all().map(toLetter);
  }

  get(id: number): DeadLetter | undefined {
    const row = this.file.rows.rowById.get({ id });
    return row?.state === 'dead' ? toLetter(row) : undefined;
  }

  /**
   * Sends dead rows again, in one transaction. Asked for by id, every row must be one that can go again,
   * else nothing changes and the ones that cannot are returned with the reason; asked for all, the ones
   * that cannot are left dead and returned with the reason, and the rest go.
   */
  retry(selection: Selection, note = ''): { retried: RetriedLetter[]; skipped: { id: number; why: string }[] } {
    try {
      return this.retryTransaction.immediate(selection, note);
    } catch (error) {
      if (error instanceof NothingRetried) return { retried: [], skipped: error.skipped };
      throw error;
    }
  }

  /** Removes dead rows from the outbox for good, keeping each whole in the file's record of actions. */
  discard(selection: Selection, note = ''): DeadLetter[] {
    return this.discardTransaction.immediate(selection, note);
  }

  private chosen(selection: Selection): OutboxRow[] {
    if (selection === 'all') return this.file.rows.allDeadRows.all();
    const found = [...new Set(selection)].sort((a, b) => a - b).map((id) => ({ id, row: this.file.rows.rowById.get({ id }) }));
    const missing = found.filter(({ row }) => row?.state !== 'dead');
    if (missing.length > 0) {
      throw new DeadLetterError(
        missing.map(({ id, row }) => ({ id, why: row ? `row ${id} is not dead` : `there is no row ${id}` })),
        `${this.file.path}: ${missing.map(({ id }) => `row ${id}`).join(', ')} ${missing.length === 1 ? 'is' : 'are'} not a dead row; \`oncebox dead list ${this.file.path}\` shows the dead rows`,
      );
    }
    return found.map(({ row }) => row!);
  }

  private retryRows(selection: Selection, note: string) {
    const retried: RetriedLetter[] = [];
    const skipped: { id: number; why: string }[] = [];
    for (const row of this.chosen(selection)) {
      const why = this.whyNotRetry(row);
      if (why) {
        skipped.push({ id: row.id, why });
        continue;
      }
      const run = { runId: row.run_id, task: row.task };
      const attempt = this.file.runs.currentAttempt(run, row.attempt);
      const seq = nextSeq(this.file.rows, { ...run, attempt });
      const moved = this.file.rows.moveDeadToEnd.get({ id: row.id, attempt, seq })!;
      this.recordAction(row, 'retried', note);
      retried.push({ id: row.id, key: row.key, newId: moved.id, attempt, seq });
    }
    // Rows asked for by id go all together or not at all: the transaction is rolled back.
    if (selection !== 'all' && skipped.length > 0) throw new NothingRetried(skipped);
    return { retried, skipped };
  }

  private whyNotRetry(row: OutboxRow): string | undefined {
    if (row.kind !== 'event') return 'only emissions can be sent again; a checkpoint update is superseded by the next one';
    const run = { runId: row.run_id, task: row.task };
    if (row.dead_code === ProducerErrorCode.Fenced || this.file.runs.isFencedHere(run)) {
      return `attempt ${this.file.runs.currentAttempt(run, row.attempt)} of run ${row.run_id} is fenced by a later attempt, which delivers the run now; start the run's next attempt on this file, which takes the parked rows over`;
    }
    // The one table of remedies (protocol/rejection-fixes.ts), which close(), status and the console read too.
    const producer = this.file.meta.read('producer');
    const remedy = deadRowRemedy(row.dead_code ?? '', {
      asset: row.asset,
      file: this.file.path,
      ids: [row.id],
      wellFormedNotice: producer !== undefined && isWellFormedNotice(producer, row),
    });
    return remedy.retry ? undefined : remedy.fix;
  }

  private discardRows(selection: Selection, note: string): DeadLetter[] {
    const discarded = this.chosen(selection);
    for (const row of discarded) {
      this.file.rows.removeDead.run({ id: row.id });
      this.recordAction(row, 'discarded', note);
    }
    return discarded.map(toLetter);
  }

  private recordAction(row: OutboxRow, action: 'retried' | 'discarded', note: string): void {
    this.statements.record.run({
      key: row.key,
      action,
      at: Date.now(),
      code: row.dead_code,
      reason: row.dead_reason,
      note,
      row: JSON.stringify(row),
    });
  }
}

/** Rolls back a retry by id of which some row cannot go again. */
class NothingRetried extends Error {
  constructor(readonly skipped: { id: number; why: string }[]) {
    super('nothing sent again');
  }
}

function toLetter(row: OutboxRow): DeadLetter {
  return {
    id: row.id,
    key: row.key,
    kind: row.kind,
    asset: row.asset,
    partitionKey: row.partition_key,
    partitionDate: row.partition_date,
    extra: row.extra === null ? null : JSON.parse(row.extra),
    workflow: row.workflow,
    runId: row.run_id,
    task: wireTask(row.task),
    attempt: row.attempt,
    seq: row.seq,
    ...deathOf(row),
    committedAt: new Date(row.committed_at).toISOString(),
    deadSince: row.settled_at === null ? null : new Date(row.settled_at).toISOString(),
  };
}
