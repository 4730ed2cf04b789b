import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** `npm run bench` as docs/benchmarks.md gives it, with arguments: its exit code and what it printed. */
function bench(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'bench/run.ts', ...args], {
    cwd: REPO,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: result.status, out: result.stdout, err: result.stderr };
}

/**
 * The bench takes a quarter of an hour when it runs whole: a mistyped option or a missing PostgreSQL must
 * end it at once with what to do, not start the full run or fail minutes in with a stack trace.
 */
describe('npm run bench, misused', () => {
  it('prints its options and sections with --help', () => {
    const { code, out } = bench(['--help']);
    expect(code).toBe(0);
    expect(out).toMatch(/^usage: npm run bench .*--only airflow\|waiters\|catalog\|testing\|growth\|pages\|pg/m);
    expect(out).toContain('ONCEBOX_TEST_PG');
  });

  it.each([
    [['--only', 'bogus'], /^bench: --only bogus: no such section; use one of airflow, waiters, catalog, testing, growth, pages, pg$/m],
    [['--only'], /^bench: Option '--only <value>' argument missing/m],
    [['--fast'], /^bench: Unknown option '--fast'/m],
  ])('refuses %j at once, with its usage and no stack trace', (args, message) => {
    // An unreachable PostgreSQL too: were the mistake not caught, the run would end there, not run whole.
    const { code, out, err } = bench(args, { ONCEBOX_TEST_PG: 'postgres://postgres@127.0.0.1:1/test' });
    expect(code).toBe(2);
    expect(err).toMatch(message);
    expect(err).toContain('usage: npm run bench');
    expect(err).not.toMatch(/\n\s+at /);
    expect(out).not.toContain('interleaved rounds');
  });

  it('says where PostgreSQL was looked for when it is not there, before measuring anything', () => {
    const { code, out, err } = bench(['--only', 'pg', '--quick'], { ONCEBOX_TEST_PG: 'postgres://postgres@127.0.0.1:1/test' });
    expect(code).toBe(2);
    expect(err).toMatch(/^bench: PostgreSQL is not reachable at postgres:\/\/postgres@127\.0\.0\.1:1\/test \(.+\); start it, or set ONCEBOX_TEST_PG to its URL$/m);
    expect(out).not.toContain('interleaved rounds');
  });
});
