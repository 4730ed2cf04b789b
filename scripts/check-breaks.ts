/**
 * npm run breaks [-- --write] [-- --only TEXT[|TEXT…]]: checks that each deliberate bug of scripts/breaks.ts is
 * caught. In a scratch copy of the working tree it first runs every named test as the code is (they
 * must pass), then puts each bug in on its own and runs its tests (every one must fail). With
 * --write it also rewrites the table in docs/guarantees.md; `--table` only rewrites the table. Not part
 * of npm test: the checks take minutes.
 *
 * `--sim` asks another question: does the whole-system simulation alone (test/sim/simulation.test.ts,
 * its fixed seeds) catch each chosen break? Each break's own tests are left out. `--guarantee G3|G25`
 * chooses the breaks of those guarantees; `--unmarked` only those not yet marked as caught by it.
 * `--skip-baseline` leaves out the first run without any break (for a measurement in parts, once a
 * baseline passed).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { cleanCopy } from './clean-copy.js';
import { BREAKS, breaksTable, SIMULATION_TEST, TABLE_END, TABLE_START, type Break, type TestSelection } from './breaks.js';

const { values } = parseArgs({
  options: {
    write: { type: 'boolean', default: false },
    table: { type: 'boolean', default: false },
    only: { type: 'string' },
    guarantee: { type: 'string' },
    sim: { type: 'boolean', default: false },
    'skip-baseline': { type: 'boolean', default: false },
    unmarked: { type: 'boolean', default: false },
  },
  strict: true,
});
const repo = fileURLToPath(new URL('..', import.meta.url));
const postgres = spawnSync('pg_isready', ['-h', '127.0.0.1', '-p', '5432', '-q']).status === 0;

/** A copy of the working tree (tracked and new files, not ignored ones) sharing node_modules. */
function scratchCopy(): string {
  const dir = cleanCopy(repo, 'oncebox-breaks-');
  // The Airflow tests run against the Airflow installed here, when it is.
  if (existsSync(join(repo, '.airflow'))) symlinkSync(join(repo, '.airflow'), join(dir, '.airflow'));
  return dir;
}

interface Outcome {
  failed: number;
  passed: number;
  error?: string;
  /** What the failing tests said, for a baseline that should have passed. */
  failures?: string;
}

function runTests(dir: string, selection: TestSelection): Outcome {
  // The JSON report vitest.config.ts asks for, as .ci/run reads it.
  const report = join(dir, '.vitest-report.json');
  rmSync(report, { force: true });
  // The simulation's seeds stop at the first that fails: a caught break costs one seed, not four.
  const bail = values.sim ? ['--bail=1'] : [];
  const args = ['vitest', 'run', selection.file, ...bail, ...(selection.name ? ['-t', selection.name] : [])];
  const run = spawnSync('npx', args, { cwd: dir, encoding: 'utf8', env: { ...process.env, ONCEBOX_RUNS: '30' } });
  try {
    const json = JSON.parse(readFileSync(report, 'utf8')) as {
      numFailedTests: number;
      numPassedTests: number;
      testResults?: { assertionResults?: { status: string; fullName: string; failureMessages?: string[] }[] }[];
    };
    if (json.numPassedTests + json.numFailedTests === 0) return { failed: 0, passed: 0, error: `no test matched: ${run.stderr.slice(-300)}` };
    const failures = (json.testResults ?? [])
      .flatMap((file) => file.assertionResults ?? [])
      .filter((test) => test.status === 'failed')
      .map((test) => `${test.fullName}: ${(test.failureMessages ?? []).join(' ').split('\n')[0]!.slice(0, 400)}`)
      .join('\n    ');
    return { failed: json.numFailedTests, passed: json.numPassedTests, failures };
  } catch {
    return { failed: 0, passed: 0, error: `no report (exit ${run.status}): ${run.stderr.slice(-300)}` };
  }
}

function apply(dir: string, b: Break): (() => void) | string {
  const originals = new Map<string, string>();
  for (const edit of b.edits) {
    const path = join(dir, edit.file);
    const text = readFileSync(path, 'utf8');
    if (!originals.has(path)) originals.set(path, text);
    const count = text.split(edit.find).length - 1;
    if (count !== 1) {
      for (const [file, original] of originals) writeFileSync(file, original);
      return `the edit of ${edit.file} no longer applies (found ${count} times): ${edit.find.slice(0, 80)}`;
    }
    writeFileSync(path, text.replace(edit.find, () => edit.replace));
  }
  return () => {
    for (const [file, original] of originals) writeFileSync(file, original);
  };
}

function writeTable(): void {
  const path = join(repo, 'docs/guarantees.md');
  const text = readFileSync(path, 'utf8');
  const start = text.indexOf(TABLE_START);
  const end = text.indexOf(TABLE_END);
  if (start < 0 || end < start) throw new Error(`docs/guarantees.md has no ${TABLE_START} … ${TABLE_END} section`);
  writeFileSync(path, `${text.slice(0, start + TABLE_START.length)}\n${breaksTable()}\n${text.slice(end)}`);
  console.log('docs/guarantees.md: table rewritten');
}

if (values.sim && values.write) {
  console.error('--sim measures the simulation alone; the table names each break\'s own tests: drop --write');
  process.exit(2);
}
if (values.table) {
  writeTable();
  process.exit(0);
}

const describe = (t: TestSelection) => `${t.file}${t.name ? ` -t "${t.name}"` : ''}`;
const SIMULATION: TestSelection = { file: SIMULATION_TEST };
const ofGuarantee = (b: Break) => !values.guarantee || values.guarantee.split('|').some((g) => b.guarantee.split(/,\s*/).includes(g));
const chosen = BREAKS.filter((b) => !values.only || values.only.split('|').some((text) => b.what.includes(text)))
  .filter(ofGuarantee)
  .filter((b) => !values.unmarked || !b.caughtBy.some((t) => t.file === SIMULATION_TEST))
  .map((b) => (values.sim ? { ...b, caughtBy: [SIMULATION] } : b))
  .filter((b) => {
    if (b.postgres && !postgres) console.log(`skipped (no PostgreSQL at 127.0.0.1:5432): ${b.what}`);
    return !b.postgres || postgres;
  });
const dir = scratchCopy();
let problems = 0;
try {
  const selections = new Map(chosen.flatMap((b) => b.caughtBy).map((t) => [describe(t), t]));
  for (const [name, selection] of values['skip-baseline'] ? [] : selections) {
    const outcome = runTests(dir, selection);
    if (outcome.error || outcome.failed > 0) {
      problems++;
      console.log(`BASELINE FAILS  ${name}: ${outcome.error ?? `${outcome.failed} failed`}${outcome.failures ? `\n    ${outcome.failures}` : ''}`);
    }
  }
  for (const b of chosen) {
    const undo = apply(dir, b);
    if (typeof undo === 'string') {
      problems++;
      console.log(`STALE   ${b.what}: ${undo}`);
      continue;
    }
    try {
      const started = Date.now();
      const results = b.caughtBy.map((t) => ({ t, outcome: runTests(dir, t) }));
      // Every test the table names must fail: the table says each one catches the bug.
      const missing = results.filter((r) => r.outcome.failed === 0);
      const took = `(${Math.round((Date.now() - started) / 1000)} s)`;
      if (missing.length > 0) {
        problems++;
        console.log(`MISSED  ${b.what}: ${missing.map((r) => `${describe(r.t)} ${r.outcome.error ?? 'passed'}`).join('; ')} ${took}`);
      } else {
        console.log(`caught  ${b.what}: ${results.map((r) => describe(r.t)).join(', ')} ${took}`);
      }
    } finally {
      undo();
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

if (values.write) writeTable();
console.log(problems === 0 ? `breaks: all ${chosen.length} caught` : `breaks: ${problems} problem(s)`);
process.exit(problems === 0 ? 0 : 1);
