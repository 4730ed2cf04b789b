import type { Catalog } from './catalog.js';

/** How often one group's reads are written down, at most: a consumer long-polls many times a minute. */
const NOTE_EVERY_MS = 5000;
/** Groups remembered per instance; past it the memory starts over (a note more, never one less). */
const MAX_GROUPS = 10_000;

/**
 * A consumer group's last fetch, for the catalog: a read of events that names its group (`?group=`) is
 * written down, at most once per NOTE_EVERY_MS per group on this instance, so that reading costs the
 * store a write only now and then.
 */
export class FetchNotes {
  private readonly noted = new Map<string, number>();

  constructor(
    private readonly catalog: Catalog,
    private readonly now: () => Date,
  ) {}

  /**
   * Resolves once the note is written (or has failed), so that the read which made it answers after it:
   * a catalog read that follows a fetch then sees it. It never rejects.
   */
  async note(producer: string, group: string): Promise<void> {
    const key = JSON.stringify([producer, group]);
    const at = this.now();
    const last = this.noted.get(key);
    if (last !== undefined && at.getTime() - last < NOTE_EVERY_MS) return;
    if (this.noted.size >= MAX_GROUPS) this.noted.clear();
    this.noted.set(key, at.getTime());
    // A note that fails (the store busy, closing) costs only a fresher time: the group's next read notes again.
    await this.catalog.noteFetch(producer, group, at).catch(() => this.noted.delete(key));
  }
}
