import { describe, expect, it } from 'vitest';
import { orderTotals } from '../../examples/testing/order-totals.js';
import { attemptsOf, checkJob, CONSUMER_POINTS, JobCheckError, type AnomalyKind, type JobUnderTest } from '../../src/testing/index.js';
import { withEnvironment } from '../support/environment.js';

/**
 * The testing kit earns its keep on jobs that get the promise wrong: each of examples/testing's wrong
 * jobs is caught within a bounded campaign from a fixed seed, shrunk to a scenario of a few steps, and its
 * seed and path replay the same failure.
 */
const ingest = (command: string): JobUnderTest => ({ command, producer: 'orders-ingest', assets: ['batch_ready'] });
const quiet = () => {};

/** `random`: the single kills are turned off, to hold fast-check's shrinking and its path replay to account too. */
const WRONG: { name: string; job: JobUnderTest; kinds: AnomalyKind[]; points?: typeof CONSUMER_POINTS; random?: true }[] = [
  { name: 'a data write that appends instead of overwriting', job: ingest('examples/testing/wrong-append-job.ts'), kinds: ['data-differs', 'changed'] },
  { name: 'a data write that appends instead of overwriting (random scenarios only)', job: ingest('examples/testing/wrong-append-job.ts'), kinds: ['data-differs', 'changed'], random: true },
  { name: 'an emission outside the checkpoint’s commit', job: ingest('examples/testing/wrong-outside-commit-job.ts'), kinds: ['checkpoint-ahead', 'lost'] },
  { name: 'a job that catches the error a commit throws and skips the batch', job: ingest('examples/testing/wrong-skip-failed-commit-job.ts'), kinds: ['checkpoint-ahead', 'lost'] },
  { name: 'a consumer’s effect outside ctx.commit', job: orderTotals('examples/testing/wrong-consumer-job.ts'), kinds: ['data-differs'], points: CONSUMER_POINTS },
  {
    name: 'a consumer’s declared effect written after ctx.commit',
    job: orderTotals('examples/testing/wrong-effect-after-commit-consumer.ts', 'SELECT order_id FROM applied'),
    kinds: ['effect-differs'],
    points: CONSUMER_POINTS,
  },
];

const outcomeOf = (campaign: Promise<unknown>) =>
  campaign.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );

describe('oncebox/testing on jobs that break the promise', () => {
  it('catches a payload that differs on a re-run (a clock in extra) in its two clean runs, before any fault', { timeout: 240_000 }, async () => {
    const error = await outcomeOf(checkJob(ingest('examples/testing/wrong-clock-job.ts'), { runs: 30, seed: 20261202, log: quiet }));
    expect(error).toBeInstanceOf(JobCheckError);
    const failure = error as JobCheckError;
    console.log(`a clock in extra:\n${failure.message}`);
    expect(failure.foundIn).toBe('two clean runs, with no fault at all,');
    expect(failure.outcome.anomalies.map((anomaly) => anomaly.kind)).toContain('changed');
  });

  for (const { name, job, kinds, points, random } of WRONG) {
    it(`catches ${name}, ${random ? 'shrinks it to a few steps' : 'with a single kill'}, and replays it`, { timeout: 600_000 }, async () => {
      const seed = 20261202;
      const options = { runs: 30, seed, log: quiet, ...(points ? { points } : {}), ...(random ? { singleKills: false } : {}) };
      const error = await outcomeOf(checkJob(job, options));
      expect(error).toBeInstanceOf(JobCheckError);
      const failure = error as JobCheckError;
      console.log(`${name}:\n${failure.message}`);
      expect(failure.outcome.anomalies.some((anomaly) => kinds.includes(anomaly.kind)), failure.message).toBe(true);
      expect(attemptsOf(failure.outcome.scenario).length).toBeLessThanOrEqual(3);
      expect(failure.message).toContain(`replay just this scenario: ${failure.replay}`);
      let replayed: unknown;
      if (random) {
        expect(failure.foundIn).toMatch(/^random scenario \d+$/);
        // The scenario itself: what a seed and path draw depends on the clean run's counts, which may differ.
        expect(failure.replay).toBe(`ONCEBOX_TESTING_SCENARIO='${JSON.stringify(failure.outcome.scenario)}'`);
        // As the message says: the variable set (the shell's quotes gone), the same test run again.
        const scenario = failure.replay.slice("ONCEBOX_TESTING_SCENARIO='".length, -1);
        replayed = await withEnvironment({ ONCEBOX_TESTING_SCENARIO: scenario }, () => outcomeOf(checkJob(job, { ...options, seed: 1 })));
      } else {
        // The plain mistakes show at once, in the single kills: one kill and one retry.
        expect(failure.foundIn).toMatch(/^single kill \d+ of \d+ \(([a-z-]+|commit-fails:SQLITE_[A-Z]+)@\d+\/(same|fresh)\)$/);
        expect(failure.outcome.scenario.attempts).toHaveLength(2);
        const [variable, value] = failure.replay.split('=') as [string, string];
        replayed = await withEnvironment({ [variable]: value }, () => outcomeOf(checkJob(job, options)));
      }
      expect(replayed).toBeInstanceOf(JobCheckError);
      expect((replayed as JobCheckError).outcome.scenario).toEqual(failure.outcome.scenario);
      expect((replayed as JobCheckError).outcome.anomalies.map((anomaly) => anomaly.kind).sort()).toEqual(failure.outcome.anomalies.map((anomaly) => anomaly.kind).sort());
    });
  }
});
