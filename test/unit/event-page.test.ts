import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { waitedPage } from '../../src/dedupe/event-page.js';
import { SqliteDedupeStore } from '../../src/dedupe/sqlite/store.js';
import { tempDir } from '../support/temp.js';

describe('a waiting read', () => {
  it('reads nothing more for a reader that left, even with the store closing under it (a server shutting down)', async () => {
    const store = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    await store.registerAsset('quiet');
    const gone = new AbortController();
    const waiting = waitedPage(store, { asset: 'quiet', after: 0, limit: 100 }, 1024 * 1024, 30_000, gone.signal);
    // Let it take its first (empty) page and start waiting.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(store.stored.waiting).toBe(1);
    gone.abort();
    await store.close();
    await expect(waiting).resolves.toEqual({ events: [], next: 0 });
  });
});
