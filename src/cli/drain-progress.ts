/**
 * What `oncebox relay --drain` shows while it drains: on a terminal one line redrawn in place (a bar,
 * pending, rate, time left); elsewhere (a log file, CI) a plain line every second.
 */
export interface DrainCounts {
  /** Events not yet delivered. */
  pending: number;
  /** Events delivered. */
  delivered: number;
  /** Events refused for good. */
  dead: number;
  /** Checkpoint updates not yet mirrored to the server: rows too, but no events. */
  checkpoints?: number;
}

export interface ProgressOutput {
  isTTY?: boolean;
  columns?: number;
  write(text: string): unknown;
}

const BAR_WIDTH = 24;
const PLAIN_EVERY_MS = 1000;
const TTY_EVERY_MS = 100;

export class DrainProgress {
  private readonly startedAt: number;
  private readonly startDelivered: number;
  private lastShown = 0;
  private drawn = false;

  constructor(
    private readonly out: ProgressOutput,
    start: DrainCounts,
    private readonly now: () => number = Date.now,
  ) {
    this.startedAt = now();
    this.startDelivered = start.delivered;
  }

  /** Called often; draws at most every 100 ms on a terminal, every second elsewhere. */
  update(counts: DrainCounts): void {
    const now = this.now();
    if (now - this.lastShown < (this.out.isTTY ? TTY_EVERY_MS : PLAIN_EVERY_MS)) return;
    this.lastShown = now;
    if (this.out.isTTY) {
      this.out.write(`\r${this.line(counts, now)}\u001b[K`);
      this.drawn = true;
    } else {
      this.out.write(`oncebox relay: ${this.plain(counts, now)}\n`);
    }
  }

  /** The last word: always printed, on its own line. */
  finish(counts: DrainCounts, outcome: string): void {
    if (this.drawn) this.out.write(`\r${this.line(counts, this.now())}\u001b[K\n`);
    const done = counts.delivered - this.startDelivered;
    this.out.write(`oncebox relay: ${outcome}: ${done} events delivered, ${counts.pending} pending, ${counts.dead} dead${checkpointsPending(counts)}\n`);
  }

  private rate(counts: DrainCounts, now: number): number {
    const seconds = (now - this.startedAt) / 1000;
    return seconds > 0 ? (counts.delivered - this.startDelivered) / seconds : 0;
  }

  private timeLeft(counts: DrainCounts, now: number): string {
    const rate = this.rate(counts, now);
    if (counts.pending === 0) return '0 s';
    return rate > 0 ? `${Math.ceil(counts.pending / rate)} s` : 'unknown';
  }

  private line(counts: DrainCounts, now: number): string {
    const done = counts.delivered - this.startDelivered;
    const total = done + counts.pending;
    const filled = total === 0 ? BAR_WIDTH : Math.round((done / total) * BAR_WIDTH);
    const bar = `[${'#'.repeat(filled)}${'-'.repeat(BAR_WIDTH - filled)}]`;
    return `${bar} ${done}/${total} events · ${counts.pending} pending · ${Math.round(this.rate(counts, now))}/s · ${this.timeLeft(counts, now)} left`;
  }

  private plain(counts: DrainCounts, now: number): string {
    const done = counts.delivered - this.startDelivered;
    return `${done} events delivered, ${counts.pending} pending, ${counts.dead} dead, ${Math.round(this.rate(counts, now))} events/s, time left ${this.timeLeft(counts, now)}${checkpointsPending(counts)}`;
  }
}

function checkpointsPending(counts: DrainCounts): string {
  const checkpoints = counts.checkpoints ?? 0;
  return checkpoints === 0 ? '' : `; ${checkpoints} checkpoint update${checkpoints === 1 ? '' : 's'} pending`;
}
