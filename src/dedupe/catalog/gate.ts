import { CatalogBusyError } from './database.js';

/** The share of time the catalog's reads may take on an instance: publishers have the rest. */
export const CATALOG_DUTY = 0.25;
/** Catalog reads waiting for their turn on an instance, at most; past it a reader is told to come back. */
export const CATALOG_QUEUE = 64;

/** The catalog has as many readers waiting as it takes: the reader is answered 503 with Retry-After. */
export class CatalogQueueFullError extends CatalogBusyError {
  constructor() {
    super(`${CATALOG_QUEUE} catalog reads are waiting for their turn on this instance already; retry in a moment`);
  }
}

/**
 * The catalog's reads, one at a time, and for at most CATALOG_DUTY of the time: after a read that took
 * t ms, the next starts t × (1 / CATALOG_DUTY - 1) ms later. However many readers loop over the costliest
 * list, they wait their turn (holding a connection and no CPU), and a publisher's request, `/healthz`
 * and the events readers never wait behind them. On a machine of two cores shared with the store, a
 * reader's CPU is taken from the publishers; this bounds how much.
 * @internal
 */
export class CatalogGate {
  private readonly queue: (() => void)[] = [];
  /** A read holds the gate (or has been let through and is about to start). */
  private busy = false;
  private nextStartAt = Number.NEGATIVE_INFINITY;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly now: () => number = () => performance.now()) {}

  async run<T>(read: () => Promise<T>): Promise<T> {
    await this.turn();
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
  private turn(): Promise<void> {
    if (!this.busy && this.queue.length === 0 && this.now() >= this.nextStartAt) {
      this.busy = true;
      return Promise.resolve();
    }
    if (this.queue.length >= CATALOG_QUEUE) return Promise.reject(new CatalogQueueFullError());
    return new Promise((resolve) => {
      this.queue.push(resolve);
      this.pump();
    });
  }

  /** Lets the first waiting read through once the gate is free and its turn has come. */
  private pump(): void {
    if (this.busy || this.queue.length === 0 || this.timer !== undefined) return;
    const wait = this.nextStartAt - this.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.pump();
      }, wait);
      return;
    }
    this.busy = true;
    this.queue.shift()!();
  }
}
