import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
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
});
