import { describe, expect, it } from 'vitest';
import { assertClean, checkJob, JobNotCheckableError, runScenario, type JobUnderTest } from '../../src/testing/index.js';
import { stderrSummary } from '../../src/testing/attempts.js';
import { withEnvironment } from '../support/environment.js';

/**
 * checkJob's own rules, beyond catching wrong jobs: what it refuses before any scenario (a job that
 * publishes nothing, two clean runs that differ, a replay without its seed), the data mapping that lets a
 * harmless difference through, and jobs started through a wrapper, whose whole process group is stopped,
 * continued and killed.
 */
const quiet = () => {};
const stamped = (more: Partial<JobUnderTest> = {}): JobUnderTest => ({ command: 'test/testing/fixtures/stamped-job.ts', producer: 'stamped', assets: ['batch_ready'], ...more });
const failure = (campaign: Promise<unknown>) =>
  campaign.then(
    () => {
      throw new Error('the campaign passed');
    },
    (error: unknown) => error as Error,
  );

describe('checkJob', () => {
  it('refuses a replay path without its seed, and a seed that is not a number, before running anything', async () => {
    const job = stamped();
    await expect(withEnvironment({ ONCEBOX_TESTING_PATH: '3:0' }, () => checkJob(job, { log: quiet }))).rejects.toThrow(/needs that campaign's seed: set ONCEBOX_TESTING_SEED/);
    await expect(withEnvironment({ ONCEBOX_TESTING_SEED: 'twelve' }, () => checkJob(job, { seed: 4, log: quiet }))).rejects.toThrow(/ONCEBOX_TESTING_SEED must be a whole number/);
  });

  it('replays a single kill by its name, refuses a name it does not know or two replays at once, and never passes a replay', { timeout: 240_000 }, async () => {
    const job = stamped({ comparableData: (_path, content) => content.toString().replace(/written at .*/, '') });
    await expect(withEnvironment({ ONCEBOX_TESTING_SINGLE_KILL: 'before-commit@1/same' }, () => checkJob(job, { seed: 1, log: quiet }))).rejects.toThrow(
      /the replayed scenario passed now:[\s\S]*SIGKILLed at before-commit \(time 1\)[\s\S]*unset it to run the whole campaign/,
    );
    await expect(withEnvironment({ ONCEBOX_TESTING_SINGLE_KILL: '3' }, () => checkJob(job, { seed: 1, log: quiet }))).rejects.toThrow(/such as before-commit@1\/fresh/);
    await expect(withEnvironment({ ONCEBOX_TESTING_SINGLE_KILL: 'after-commit@1/fresh', ONCEBOX_TESTING_SEED: '5', ONCEBOX_TESTING_PATH: '1' }, () => checkJob(job, { log: quiet }))).rejects.toThrow(/set one of them/);
    await expect(withEnvironment({ ONCEBOX_TESTING_SEED: '5', ONCEBOX_TESTING_PATH: '0' }, () => checkJob(job, { log: quiet, runs: 1 }))).rejects.toThrow(/ONCEBOX_TESTING_PATH replays one scenario/);
    // A scenario as a failure writes it: replayed as it is, and refused when it is not one.
    const written = JSON.stringify({ attempts: [{ machine: 'same', end: { kind: 'commit-fails', hit: 1, error: 'SQLITE_BUSY' } }], network: ['duplicate'] });
    await expect(withEnvironment({ ONCEBOX_TESTING_SCENARIO: written }, () => checkJob(job, { seed: 1, log: quiet }))).rejects.toThrow(
      /the replayed scenario passed now:[\s\S]*its commit 1 throws SQLITE_BUSY[\s\S]*network, for the first requests in order: duplicate[\s\S]*ONCEBOX_TESTING_SCENARIO replays one scenario/,
    );
    await expect(withEnvironment({ ONCEBOX_TESTING_SCENARIO: '{"attempts":[' }, () => checkJob(job, { log: quiet }))).rejects.toThrow(/ONCEBOX_TESTING_SCENARIO is a scenario[\s\S]*this is not JSON/);
    await expect(withEnvironment({ ONCEBOX_TESTING_SCENARIO: '{"attempts":[{"machine":"moon","end":{"kind":"completes"}}],"network":[]}' }, () => checkJob(job, { log: quiet }))).rejects.toThrow(
      /attempts\.0\.machine/,
    );
    await expect(withEnvironment({ ONCEBOX_TESTING_SCENARIO: written, ONCEBOX_TESTING_SINGLE_KILL: 'after-commit@1/fresh' }, () => checkJob(job, { log: quiet }))).rejects.toThrow(/set one of them/);
  });

  it('shows the line that names an attempt’s error, not the source line that made it', () => {
    const stderr = [
      'file:///tmp/job.mjs:3',
      '  return new TypeError(`config broken: ${detail} (fix: set FOO)`);',
      '         ^',
      '',
      'TypeError: config broken: FOO is missing (fix: set FOO)',
      '    at fail (/tmp/job.ts:3:10)',
      '    at main (/tmp/job.ts:5:3)',
      '    at one (/tmp/job.ts:6:3)',
      '    at two (/tmp/job.ts:7:3)',
      '    at three (/tmp/job.ts:8:3)',
      '    at four (/tmp/job.ts:9:3)',
      '',
      'Node.js v20.20.2',
    ].join('\n');
    expect(stderrSummary(stderr).split('\n')[0]).toBe('TypeError: config broken: FOO is missing (fix: set FOO)');
    // A system error is a plain `Error: CODE: …`, followed by its properties: its line is found too.
    const system = [
      'node:fs:573',
      '  return binding.open(',
      '                 ^',
      '',
      "Error: ENOENT: no such file or directory, open '/tmp/data/batch-1.csv'",
      '    at Object.openSync (node:fs:573:18)',
      '    at main (/tmp/job.ts:5:3) {',
      '  errno: -2,',
      "  code: 'ENOENT',",
      "  syscall: 'open',",
      "  path: '/tmp/data/batch-1.csv'",
      '}',
      '',
      'Node.js v20.20.2',
    ].join('\n');
    expect(stderrSummary(system).split('\n')[0]).toBe("Error: ENOENT: no such file or directory, open '/tmp/data/batch-1.csv'");
  });

  it('gives the job its data folder made, as a storage bucket or a volume is there before the job', { timeout: 240_000 }, async () => {
    const job = stamped({ env: { MAKE_DATA_FOLDER: 'no' }, comparableData: () => undefined });
    assertClean(await runScenario(job, { attempts: [{ machine: 'same', end: { kind: 'completes' } }], network: [] }));
  });

  it('refuses a job that publishes nothing in a clean run: there would be nothing to check', { timeout: 240_000 }, async () => {
    const error = await failure(checkJob(stamped({ env: { PUBLISH: 'no' }, comparableData: () => undefined }), { runs: 1, seed: 1, log: quiet }));
    expect(error.message).toMatch(/published no event in a clean run \(producer stamped, assets batch_ready\)/);
    expect(error).toBeInstanceOf(JobNotCheckableError);
    expect(error).toMatchObject({ code: 'job_not_checkable' });
    expect(error.message).toContain('awaits box.close()');
  });

  it('refuses a job whose two clean runs differ, naming what differs, and takes it once comparableData maps the difference out', { timeout: 300_000 }, async () => {
    const error = await failure(checkJob(stamped(), { runs: 1, seed: 1, log: quiet }));
    expect(error.message).toMatch(/two clean runs of the job, with no fault at all, left different data/);
    expect(error.message).toContain('data-differs     data report.txt');
    expect(error.message).toContain('comparableData');

    const mapped = stamped({ comparableData: (_path, content) => content.toString().replace(/written at .*/, '') });
    const result = await checkJob(mapped, { runs: 2, seed: 7, log: quiet, zombies: false, maxFaults: 0 });
    // Every producer point is reached (one commit, one terminal commit): each killed at its first and
    // last time, retried on the same and on a fresh machine.
    expect(result.singleKills).toBeGreaterThanOrEqual(5 * 2);
    expect(result.singleKills % 2).toBe(0);
    expect(result.runs).toBe(2);
  });

  it('stops, continues and kills a job started through a wrapper script, whole', { timeout: 180_000 }, async () => {
    const job: JobUnderTest = {
      command: ['sh', '-c', `"${process.execPath}" --import tsx examples/testing/ingest-job.ts; exit $?`],
      producer: 'orders-ingest',
      assets: ['batch_ready', 'ingest_done'],
      attemptTimeoutMs: 40_000,
    };
    const zombie = await runScenario(job, {
      attempts: [
        { machine: 'same', end: { kind: 'zombie', at: 'after-commit', hit: 2, resume: 'after-next' } },
        { machine: 'fresh', end: { kind: 'killed', at: 'before-commit', hit: 1 } },
      ],
      network: [],
    });
    // Without the process group, the zombie's job would stay stopped under its continued wrapper until the
    // time limit, and a killed job's wrapper would wait on.
    expect(zombie.attempts.map((attempt) => attempt.timedOut)).toEqual([false, false, false]);
    expect(zombie.attempts[0]).toMatchObject({ planned: 'zombie', reachedPoint: true });
    expect(zombie.attempts[1], zombie.report).toMatchObject({ planned: 'killed', reachedPoint: true });
    expect(zombie.anomalies, zombie.report).toEqual([]);
  });
});
