import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createServer, SqliteDedupeStore } from '../../src/dedupe/index.js';
import { tempDir } from '../support/temp.js';

/** What only the embedded SQLite store has to get right. */
describe('the SQLite store', () => {
  it('fsyncs every commit unless told otherwise', async () => {
    const store = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    // synchronous is per connection: read it on the store's own (2 is FULL).
    expect((store as unknown as { db: Database.Database }).db.pragma('synchronous', { simple: true })).toBe(2);
    await store.close();
    await store.close();
  });

  it('refuses a file whose schema is newer than this code knows', async () => {
    const path = join(tempDir(), 'server.db');
    const db = new Database(path);
    db.pragma('user_version = 99');
    db.close();
    const opening = createServer({ db: path });
    await expect(opening).rejects.toMatchObject({
      code: 'schema_too_new',
      message: expect.stringMatching(new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: server schema version 99 is newer than this oncebox knows \\(\\d+\\); upgrade oncebox\\.$`)),
    });
  });
});
