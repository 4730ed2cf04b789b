/**
 * A figure that is costly to compute, answered from its last computation: computed again at most every
 * `everyMs`, in the background, so that however often it is asked for (a Prometheus scrape every second,
 * by several scrapers) it costs the store one computation per period. The first ask waits for the first
 * computation; a computation that fails keeps the last figure, and the next ask tries again.
 * @internal
 */
export class CachedFigure<T> {
  private value: T | undefined;
  private computedAt = Number.NEGATIVE_INFINITY;
  private running: Promise<void> | undefined;

  constructor(
    private readonly compute: () => Promise<T>,
    private readonly everyMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  async get(): Promise<T | undefined> {
    if (this.now() - this.computedAt >= this.everyMs) {
      this.running ??= this.compute()
        .then(
          (value) => {
            this.value = value;
            this.computedAt = this.now();
          },
          () => undefined,
        )
        .finally(() => {
          this.running = undefined;
        });
      if (this.value === undefined) await this.running;
    }
    return this.value;
  }
}
