/** The key of readers waiting for events of any asset. */
const ANY_ASSET = '\u0000any';

/**
 * Wakes the readers waiting on `GET /v1/events?wait=` when events were stored: by this instance, or on
 * PostgreSQL by any instance (LISTEN/NOTIFY). A wake only says "look again"; the reader then reads the
 * store, so a wake that was missed costs at most one poll interval, never an event. Readers wait for one
 * asset or for any: a store that says which assets got events wakes only their readers (and those of
 * any asset), so that idle readers of a quiet asset cost a publish nothing. A store of your own notifies
 * it after each commit that stored events, and closes it when it closes.
 */
export class EventSignal {
  private waiters = new Map<string, Set<() => void>>();
  private count = 0;
  private closed = false;
  private notified = 0;

  /**
   * How many notifies there have been: a read begun since the last one sees every event they announced,
   * so readers woken by them may share it, while an older read may not serve them.
   */
  get generation(): number {
    return this.notified;
  }

  /** The server is closing: a reader answers with what it has. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Readers waiting now, for the metrics. */
  get waiting(): number {
    return this.count;
  }

  /**
   * Events were stored: their assets' readers, and the readers of any asset, look again. Without
   * `assets` (a store that cannot tell), every reader does.
   */
  notify(assets?: Iterable<string>): void {
    this.notified++;
    if (assets === undefined) {
      const all = [...this.waiters.values()];
      this.waiters = new Map();
      for (const set of all) for (const wake of set) wake();
      return;
    }
    for (const key of new Set([...assets, ANY_ASSET])) {
      const set = this.waiters.get(key);
      if (set === undefined) continue;
      this.waiters.delete(key);
      for (const wake of set) wake();
    }
  }

  /**
   * Resolves at the next notify of one of `assets` (any asset when left out), after `timeoutMs`, when
   * `signal` aborts, or at once when closed.
   * @returns true when it was woken by a notify.
   */
  wait(timeoutMs: number, signal?: AbortSignal, assets?: string | readonly string[]): Promise<boolean> {
    if (this.closed || signal?.aborted) return Promise.resolve(false);
    const keys = assets === undefined ? [ANY_ASSET] : typeof assets === 'string' ? [assets] : [...new Set(assets)];
    return new Promise<boolean>((resolve) => {
      let finished = false;
      const done = (woken: boolean) => {
        // Waiting under several assets, a reader may be woken by each: it answers once.
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        for (const key of keys) {
          const set = this.waiters.get(key);
          if (set?.delete(wake) && set.size === 0) this.waiters.delete(key);
        }
        this.count--;
        resolve(woken);
      };
      const wake = () => done(true);
      const aborted = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      signal?.addEventListener('abort', aborted, { once: true });
      for (const key of keys) {
        let set = this.waiters.get(key);
        if (set === undefined) this.waiters.set(key, (set = new Set()));
        set.add(wake);
      }
      this.count++;
    });
  }

  /** The server is closing: every reader answers now, and none waits from here on. */
  close(): void {
    this.closed = true;
    this.notify();
  }
}
