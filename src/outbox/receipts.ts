import { FencedError, LeaseLostError, ProducerErrorCode, RejectedError } from '../protocol/errors.js';
import { deathOf } from './file/rows.js';
import type { Receipt } from '../protocol/wire.js';
import type { OutboxRow } from './file/schema.js';
import type { SettledRow } from './events.js';
import type { Fence } from './run.js';

interface Waiter {
  resolve: (receipt: Receipt) => void;
  reject: (error: Error) => void;
  /** The emission was a re-commit of a row that already existed: this call created no event. */
  recommitted: boolean;
}

/**
 * The receipt promises that callers are awaiting, by outbox row. Only awaited rows are tracked, so
 * memory stays flat however long the backlog is.
 * @internal
 */
export class ReceiptWaiters {
  private readonly waiting = new Map<number, Waiter[]>();

  get size(): number {
    return this.waiting.size;
  }

  rowIds(): number[] {
    return [...this.waiting.keys()];
  }

  /** A promise of the receipt of `row`, settled at once when the row is settled already. */
  wait(row: OutboxRow, recommitted: boolean, fence?: Fence): Promise<Receipt> {
    return new Promise<Receipt>((resolve, reject) => {
      const waiter = { resolve, reject, recommitted };
      if (row.state !== 'pending') {
        settleWaiter(waiter, fromRow(row, fence));
        return;
      }
      const list = this.waiting.get(row.id);
      if (list) list.push(waiter);
      else this.waiting.set(row.id, [waiter]);
    });
  }

  settle(rows: readonly SettledRow[]): void {
    if (this.waiting.size === 0) return;
    for (const row of rows) {
      const list = this.waiting.get(row.id);
      if (!list) continue;
      this.waiting.delete(row.id);
      for (const waiter of list) settleWaiter(waiter, row);
    }
  }

  rejectAll(error: Error): void {
    this.stopPolling();
    for (const list of this.waiting.values()) for (const waiter of list) waiter.reject(error);
    this.waiting.clear();
  }

  private pollTimer: NodeJS.Timeout | undefined;

  /**
   * Settles the waiters from the file while another process's relay delivers (`relay: 'external'`, or
   * this process's relay standing by): its answers reach the file, never `settle`. Reads every
   * RECEIPT_POLL_MS until nobody waits; `readSettled` gives a row's answer once it has one.
   */
  pollFile(readSettled: (rowId: number) => SettledRow | undefined, ourRelayDelivers: () => boolean): void {
    if (this.pollTimer !== undefined) return;
    this.pollTimer = setInterval(() => {
      if (this.waiting.size === 0) return this.stopPolling();
      if (ourRelayDelivers()) return;
      this.settle(this.rowIds().flatMap((id) => readSettled(id) ?? []));
    }, RECEIPT_POLL_MS);
  }

  stopPolling(): void {
    clearInterval(this.pollTimer);
    this.pollTimer = undefined;
  }
}

/** How often a receipt promise checks the file while another process's relay does the delivering. */
const RECEIPT_POLL_MS = 50;

/** @internal The settled form of a row read back from the file. */
export function fromRow(row: OutboxRow, fence?: Fence): SettledRow {
  return row.state === 'dead'
    ? {
        id: row.id,
        state: 'dead',
        key: row.key,
        ...deathOf(row),
        ...(row.dead_code === ProducerErrorCode.Fenced && fence ? { fence } : {}),
      }
    : {
        id: row.id,
        state: 'delivered',
        key: row.key,
        eventId: row.event_id!,
        timestamp: row.event_ts!,
        duplicate: row.duplicate === 1,
      };
}

function settleWaiter(waiter: Waiter, row: SettledRow): void {
  if (row.state === 'delivered') {
    waiter.resolve({ eventId: row.eventId, timestamp: row.timestamp, duplicate: row.duplicate || waiter.recommitted });
  } else if (row.code === ProducerErrorCode.Fenced) {
    const { attempt, by } = row.fence ?? { attempt: 0, by: 0 };
    waiter.reject(new FencedError(attempt, by, `the emission was not delivered: ${row.reason}; a later attempt of this run has delivered`));
  } else {
    waiter.reject(new RejectedError(row.code, row.key, `the server rejected emission ${row.key} (${row.code}): ${row.reason}; \`oncebox dead list\` on the outbox file says what fixes it`));
  }
}

/** Whether a relay's stop for good ends the receipts still awaited: every stop but a lost lease, after which the relay that took it delivers. @internal */
export function endsReceipts(error: unknown): boolean {
  return !(error instanceof LeaseLostError);
}
