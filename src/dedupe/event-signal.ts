/**
 * Wakes the readers waiting on `GET /v1/events?wait=` when events were stored: by this instance, or on
 * PostgreSQL by any instance (LISTEN/NOTIFY). A wake only says "look again"; the reader then reads the
 * store, so a wake that was missed costs at most one poll interval, never an event. A store of your
 * own notifies it after each commit that stored events, and closes it when it closes.
 */
export class EventSignal {
  private waiters = new Set<() => void>();
  private closed = false;

  /** The server is closing: a reader answers with what it has. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Readers waiting now, for the metrics. */
  get waiting(): number {
    return this.waiters.size;
  }

  /** Events were stored: every waiting reader looks again. */
  notify(): void {
    const waiters = this.waiters;
    this.waiters = new Set();
    for (const wake of waiters) wake();
  }

  /**
   * Resolves at the next notify, after `timeoutMs`, when `signal` aborts, or at once when closed.
   * @returns true when it was woken by a notify.
   */
  wait(timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.closed || signal?.aborted) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const done = (woken: boolean) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        this.waiters.delete(wake);
        resolve(woken);
      };
      const wake = () => done(true);
      const aborted = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      signal?.addEventListener('abort', aborted, { once: true });
      this.waiters.add(wake);
    });
  }

  /** The server is closing: every reader answers now, and none waits from here on. */
  close(): void {
    this.closed = true;
    this.notify();
  }
}
