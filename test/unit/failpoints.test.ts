import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../support/temp.js';
import { join } from 'node:path';
import { REPO } from '../support/child.js';

/**
 * A failpoint kills (or stops) the process even when nobody reads its stdout: its notice is for whoever
 * watches, and a closed stdout must not turn a planned crash into a thrown error.
 */
describe('failpoints', () => {
  it('kill the process at their point when nobody reads its stdout, and say so on stdout when someone does', () => {
    const script = "import('./src/failpoints/failpoints.ts').then((m) => { m.failpoint('commit:before'); console.error('survived the failpoint'); })";
    // Its stdout a pipe whose reader is gone (`| true` exits at once): the notice meets EPIPE.
    const unread = spawnSync('bash', ['-c', `"${process.execPath}" --import tsx -e "${script}" | true; echo "status \${PIPESTATUS[0]}" >&2`], {
      cwd: REPO,
      encoding: 'utf8',
      env: { ...process.env, ONCEBOX_FAILPOINT: 'commit:before@1' },
      timeout: 60_000,
    });
    expect(unread.stderr.trim()).toBe('status 137');
    const run = (redirect: string) =>
      spawnSync('sh', ['-c', `exec "${process.execPath}" --import tsx -e "${script}" ${redirect}`], {
        cwd: REPO,
        encoding: 'utf8',
        env: { ...process.env, ONCEBOX_FAILPOINT: 'commit:before@1' },
        timeout: 60_000,
      });
    const open = run('');
    expect(open.signal).toBe('SIGKILL');
    expect(open.stdout.trim()).toBe('{"failpoint":"commit:before","hit":1,"kill":true}');
  });

  it("throw SQLite's own error inside the commit's transaction, which writes nothing of it", () => {
    const path = join(tempDir(), 'outbox.db');
    const script = [
      "const { openOutbox } = await import('./src/outbox/index.ts');",
      "const { z } = await import('zod');",
      `const box = await openOutbox({ path: ${JSON.stringify(path)}, server: 'http://127.0.0.1:9', producer: 'p', relay: 'manual', run: { workflow: 'w', runId: 'r', attempt: 1 } });`,
      "const progress = box.checkpoint('progress', z.number());",
      "const commit = (n) => { try { box.commit((tx) => { tx.set(progress, n); tx.emit(box.asset('a'), { partitionKey: 'b' + n }); }); return 'committed'; } catch (e) { return e.name + ' ' + e.code + ': ' + e.message; } };",
      "console.log(JSON.stringify({ first: commit(1), second: commit(2), progress: progress.get(), pending: box.file.pendingCount() }));",
    ].join(' ');
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: REPO,
      encoding: 'utf8',
      env: { ...process.env, ONCEBOX_FAILPOINT: 'commit:after-write@2:throw=SQLITE_FULL', ONCEBOX_LOG_LEVEL: 'silent' },
      timeout: 60_000,
    });
    const lines = run.stdout.trim().split('\n');
    expect(lines[0]).toBe('{"failpoint":"commit:after-write","hit":2,"throw":"SQLITE_FULL"}');
    expect(JSON.parse(lines[1]!), run.stderr).toEqual({ first: 'committed', second: expect.stringMatching(/^OutboxWriteError outbox_write_failed: .*outbox\.db: this commit wrote nothing \(SQLITE_FULL: database or disk is full\): the disk it is on is full\. Free space there, then commit again/), progress: 1, pending: 2 });
    const unknown = spawnSync(process.execPath, ['--import', 'tsx', '-e', "import('./src/failpoints/failpoints.ts')"], {
      cwd: REPO,
      encoding: 'utf8',
      env: { ...process.env, ONCEBOX_FAILPOINT: 'commit:after-write@1:throw=SQLITE_NOPE' },
      timeout: 60_000,
    });
    expect(unknown.stderr).toContain('SQLITE_NOPE is not one of SQLITE_FULL, SQLITE_BUSY');
  });
});
