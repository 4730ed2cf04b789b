import { deadRowRemedy } from '../protocol/rejection-fixes.js';
import type { RelayError } from './events.js';
import type { DeadRow, OutboxStatus } from './status.js';

/*
 * What closing an outbox leaves behind: counted (CloseResult), and said in words for a job's last line.
 */

export interface CloseOptions {
  /** How long to wait for pending rows to be delivered before closing anyway. @defaultValue 10000 */
  timeoutMs?: number;
}

export interface CloseResult {
  /** Rows still pending at close, emissions and checkpoint updates together; the next relay on this file delivers them. */
  pending: number;
  /** Of `pending`, the emissions (events not yet on the server). */
  pendingEvents: number;
  /** Of `pending`, the checkpoint updates (the server's copy of the job's progress, not yet mirrored). */
  pendingCheckpoints: number;
  /** Emissions parked as dead in the file: each needs `oncebox dead retry` or `discard`. */
  dead: number;
  /** The first dead emissions, each with the server's code and reason: what to fix before `oncebox dead retry`. */
  deadRows: DeadRow[];
  /** The relay's last delivery error, while it lasted: a delivery that went through again cleared it. */
  lastError: RelayError | null;
  /**
   * What is left, in one sentence for a person: events and checkpoint updates apart, the first dead row's
   * reason, and the command that delivers or fixes each; `nothing left` when all was delivered.
   */
  summary: string;
}

/** @internal What a closing outbox leaves behind, counted from its last status and said in words. */
export function leftoversOf(path: string, status: OutboxStatus, servers: readonly string[]): CloseResult {
  const counts = {
    pending: status.pending + status.pendingCheckpoints,
    pendingEvents: status.pending,
    pendingCheckpoints: status.pendingCheckpoints,
    dead: status.dead,
    deadRows: status.deadRows,
    lastError: status.lastError,
  };
  return { ...counts, summary: describeLeftovers(path, counts, servers) };
}

/**
 * @internal What a closing outbox leaves behind, in words (CloseResult's summary): events and checkpoint
 * updates apart, the first dead row's reason, and the commands that deliver or fix each.
 */
function describeLeftovers(path: string, left: Omit<CloseResult, 'summary'>, servers: readonly string[]): string {
  if (left.pending === 0 && left.dead === 0) return `${path}: nothing left`;
  const parts: string[] = [];
  if (left.pending > 0) {
    const what = [left.pendingEvents > 0 ? count(left.pendingEvents, 'event') : '', left.pendingCheckpoints > 0 ? count(left.pendingCheckpoints, 'checkpoint update') : ''].filter(Boolean).join(' and ');
    const relay = `oncebox relay ${path} ${(servers.length === 0 ? ['URL'] : servers).map((server) => `--server ${server}`).join(' ')} --drain`;
    parts.push(`${what} not delivered yet (they stay in the file; the next run delivers them, or \`${relay}\` now, with the job's token in ONCEBOX_TOKEN)`);
  }
  if (left.dead > 0) {
    const first = left.deadRows[0];
    const why = first === undefined ? '' : `, the first refused with ${first.code}: ${first.reason}`;
    parts.push(`${count(left.dead, 'event')} refused for good${why} (${deadRowsAdvice(path, left.deadRows, left.dead).join(' ')})`);
  }
  const error = left.lastError && left.pending > 0 ? `; last delivery error: ${left.lastError.message}` : '';
  return `${path}: ${parts.join('; ')}${error}`;
}

/**
 * @internal What to do about a file's dead rows: the remedy of each code among the first `shown` (one
 * table for every place that says it), and where to see the rest.
 */
export function deadRowsAdvice(path: string, shown: readonly DeadRow[], dead: number): string[] {
  // By code and asset: a remedy may name the asset (the one to register).
  const groups = new Map<string, DeadRow[]>();
  for (const row of shown) groups.set(`${row.code}\u0000${row.asset}`, [...(groups.get(`${row.code}\u0000${row.asset}`) ?? []), row]);
  const advice = [...groups.values()].map((rows) => `${rows[0]!.code}: ${deadRowRemedy(rows[0]!.code, { asset: rows[0]!.asset, file: path, ids: rows.map((row) => row.id) }).fix}`);
  advice.push(`\`oncebox dead list ${path}\` shows ${dead > shown.length ? `all ${dead}` : 'each'}.`);
  return advice;
}

function count(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? '' : 's'}`;
}
