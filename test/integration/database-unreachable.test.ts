import { describe, expect, it } from 'vitest';
import { openDedupeStore } from '../../src/dedupe/open-store.js';
import { runScript } from '../support/child.js';

/** A port where nothing listens. */
const NOBODY = 'postgres://jobs:hunter2@127.0.0.1:9/oncebox';

describe('a server whose PostgreSQL cannot be used', () => {
  it('fails to open with where it tried and what to do, never the password', async () => {
    const opening = openDedupeStore({ db: NOBODY });
    await expect(opening).rejects.toMatchObject({
      code: 'database_unreachable',
      message: expect.stringMatching(/^cannot use PostgreSQL at 127\.0\.0\.1:9, database oncebox, user jobs \(ECONNREFUSED: .*\): nothing listens there: start PostgreSQL, or correct the host and port$/),
    });
  });

  it('ends `oncebox server` with that line and status 1', async () => {
    const run = await runScript('src/cli/main.ts', ['server', '--db', NOBODY, '--port', '0']);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('cannot use PostgreSQL at 127.0.0.1:9, database oncebox, user jobs (ECONNREFUSED');
    expect(run.stderr).toContain('[database_unreachable]');
    expect(run.stderr).not.toContain('hunter2');
  });
});
