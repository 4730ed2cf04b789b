import { CatalogBusyError } from './database.js';

/** The share of time the catalog's reads may take on an instance: publishers have the rest. */
export const CATALOG_DUTY = 0.25;
/** Catalog reads waiting for their turn on an instance, at most; past it a reader is told to come back. */
export const CATALOG_QUEUE = 64;
/** Catalog reads of one reader (one token) waiting for their turn, at most: no reader holds the others out. */
export const CATALOG_QUEUE_PER_READER = 8;

/** The catalog has as many reads waiting as it takes, or as many of this reader's: answered 503 with Retry-After. */
export class CatalogQueueFullError extends CatalogBusyError {
  constructor(mine: boolean) {
    super(
      mine
        ? `${CATALOG_QUEUE_PER_READER} catalog reads of this token are waiting for their turn on this instance already; wait for them before asking again`
        : `${CATALOG_QUEUE} catalog reads are waiting for their turn on this instance already; retry in a moment`,
    );
  }
}

/**
 * The catalog's reads, one at a time, and for at most CATALOG_DUTY of the time: after a read that took
 * t ms, the next starts t × (1 / CATALOG_DUTY - 1) ms later. However many readers loop over the costliest
 * list, they wait their turn (holding a connection and no CPU), and a publisher's request, `/healthz`
 * and the events readers never wait behind them. On a machine of two cores shared with the store, a
 * reader's CPU is taken from the publishers; this bounds how much. Readers take turns by token, in
 * rotation: one that keeps many reads waiting waits for its own, not the others for it.
 * @internal
 */
export class CatalogGate {
  /** The reads waiting, by reader, and the readers in the order their turn comes. */
  private readonly waiting = new Map<string, (() => void)[]>();
  private readonly rotation: string[] = [];
  private queued = 0;
  /** A read holds the gate (or has been let through and is about to start). */
  private busy = false;
  private nextStartAt = Number.NEGATIVE_INFINITY;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Runs `read` of `reader` (a token's principal) in its turn. */
  async run<T>(reader: string, read: () => Promise<T>): Promise<T> {
    await this.turn(reader);
    const started = this.now();
    try {
      return await read();
    } finally {
      const ended = this.now();
      this.nextStartAt = ended + (ended - started) * (1 / CATALOG_DUTY - 1);
      this.busy = false;
      this.pump();
    }
  }

  /** Resolves once the caller holds the gate. */
  private turn(reader: string): Promise<void> {
    if (!this.busy && this.queued === 0 && this.now() >= this.nextStartAt) {
      this.busy = true;
      return Promise.resolve();
    }
    const mine = this.waiting.get(reader) ?? [];
    if (mine.length >= CATALOG_QUEUE_PER_READER) return Promise.reject(new CatalogQueueFullError(true));
    if (this.queued >= CATALOG_QUEUE) return Promise.reject(new CatalogQueueFullError(false));
    return new Promise((resolve) => {
      if (mine.length === 0) {
        this.waiting.set(reader, mine);
        this.rotation.push(reader);
      }
      mine.push(resolve);
      this.queued++;
      this.pump();
    });
  }

  /** Lets the next reader's first waiting read through once the gate is free and its turn has come. */
  private pump(): void {
    if (this.busy || this.queued === 0 || this.timer !== undefined) return;
    const wait = this.nextStartAt - this.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.pump();
      }, wait);
      return;
    }
    const reader = this.rotation.shift()!;
    const mine = this.waiting.get(reader)!;
    const go = mine.shift()!;
    this.queued--;
    // The reader goes to the back of the rotation while it has reads waiting.
    if (mine.length > 0) this.rotation.push(reader);
    else this.waiting.delete(reader);
    this.busy = true;
    go();
  }
}
