import { EventEmitter } from 'node:events';
import { ProducerErrorCode, type OnceboxError } from '../../protocol/errors.js';
import type { SettledRow } from '../events.js';
import type { OutboxLogger } from '../../client/logger.js';
import type { PendingRows } from '../file/outbox-file.js';
import type { DeliveredNotice, DeliveryProblem, FencedNotice, OutboxEventMap } from '../events.js';

export interface ReporterOptions {
  logger: OutboxLogger;
  /** How long delivery may fail before it is logged and reported as 'error'. */
  failingAfterMs: number;
  /** The same cause is logged again at most this often, with how often it happened in between. */
  repeatMs: number;
  pending: () => PendingRows;
  now: () => number;
}

/**
 * Turns what the relay sees into log lines and events, so that no failure a user must act on passes in
 * silence, and none floods the log: each cause is logged once, then at most once per `repeatMs`, with
 * the count of repeats.
 * @internal
 */
export class Reporter {
  readonly events = new EventEmitter<OutboxEventMap>();
  private readonly logged = new Map<string, { at: number; repeats: number }>();
  private failingSince: number | undefined;
  private reportedFailure = false;

  constructor(private readonly options: ReporterOptions) {}

  /** A delivery attempt failed and will be retried. */
  deliveryFailed(error: OnceboxError): void {
    const now = this.options.now();
    this.failingSince ??= now;
    if (now - this.failingSince < this.options.failingAfterMs) return;
    this.reportedFailure = true;
    this.problem(error, false, 'warn', `delivery has been failing for ${Math.round((now - this.failingSince) / 1000)} s; retrying with the same keys`);
  }

  /** A delivery attempt got per-item answers: a failure streak, if any, is over. */
  deliverySucceeded(): void {
    if (this.reportedFailure) {
      const pending = this.pendingContext();
      this.options.logger.info({ code: 'delivering', ...pending }, `oncebox relay: delivering again; ${describePending(pending)}`);
    }
    this.failingSince = undefined;
    this.reportedFailure = false;
  }

  /** The relay stopped for good: nothing more is delivered from this process until it is restarted. */
  stopped(error: OnceboxError): void {
    this.failingSince ??= this.options.now();
    this.problem(error, true, 'error', 'the relay stopped; nothing more is delivered by this process');
  }

  settled(rows: readonly SettledRow[]): void {
    const delivered: DeliveredNotice[] = [];
    for (const row of rows) {
      if (row.state === 'delivered') {
        delivered.push({ id: row.id, key: row.key, eventId: row.eventId, timestamp: row.timestamp, duplicate: row.duplicate });
        continue;
      }
      if (row.code === ProducerErrorCode.Fenced) continue; // told once, by fenced()
      this.once(`dead:${row.code}`, 'error', { code: row.code, id: row.id, key: row.key, reason: row.reason }, `oncebox relay: an emission was refused for good and parked as dead (${row.code}): ${row.reason}; \`oncebox dead list\` on the outbox file says what fixes it`);
      this.events.emit('dead', { id: row.id, key: row.key, code: row.code, reason: row.reason });
    }
    if (delivered.length > 0) this.events.emit('delivered', delivered);
  }

  fenced(fence: FencedNotice): void {
    this.once(
      `fenced:${fence.runId}:${fence.attempt}`,
      'warn',
      { code: ProducerErrorCode.Fenced, ...fence },
      `oncebox relay: attempt ${fence.attempt} of run ${fence.runId} was fenced by attempt ${fence.by}; its pending rows are parked, and this process should stop`,
    );
    this.events.emit('fenced', fence);
  }

  private problem(error: OnceboxError, stopped: boolean, level: 'warn' | 'error', what: string): void {
    const problem: DeliveryProblem = {
      code: error.code,
      message: error.message,
      at: new Date(this.options.now()).toISOString(),
      since: new Date(this.failingSince!).toISOString(),
      ...this.pendingContext(),
      stopped,
    };
    const logged = this.once(`failure:${error.code}`, level, { ...problem }, `oncebox relay: ${what}: ${error.message} (${describePending(problem)})`);
    // An 'error' event with no listener would throw (Node's rule); the log line already told.
    if (logged && this.events.listenerCount('error') > 0) this.events.emit('error', problem);
  }

  private pendingContext(): Pick<DeliveryProblem, 'pending' | 'pendingEvents' | 'pendingCheckpoints'> {
    const { events, checkpoints } = this.options.pending();
    return { pending: events + checkpoints, pendingEvents: events, pendingCheckpoints: checkpoints };
  }

  /** Logs a cause the first time, then at most once per repeatMs. @returns whether it logged. */
  private once(cause: string, level: 'warn' | 'error', context: object, message: string): boolean {
    const now = this.options.now();
    const seen = this.logged.get(cause);
    if (seen && now - seen.at < this.options.repeatMs) {
      seen.repeats++;
      return false;
    }
    const repeats = seen?.repeats ?? 0;
    this.logged.set(cause, { at: now, repeats: 0 });
    this.options.logger[level]({ ...context, ...(repeats > 0 ? { repeatsSinceLastLog: repeats } : {}) }, message);
    return true;
  }
}

/** What waits, in words: events and checkpoint updates apart, as close() and status say them. */
function describePending(pending: Pick<DeliveryProblem, 'pendingEvents' | 'pendingCheckpoints'>): string {
  const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
  return `${plural(pending.pendingEvents, 'event')} and ${plural(pending.pendingCheckpoints, 'checkpoint update')} waiting`;
}
