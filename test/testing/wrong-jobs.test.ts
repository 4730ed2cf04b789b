import { describe, expect, it } from 'vitest';
import { orderTotals } from '../../examples/testing/order-totals.js';
import { attemptsOf, checkJob, CONSUMER_POINTS, JobCheckError, type AnomalyKind, type JobUnderTest } from '../../src/testing/index.js';

/**
 * The testing kit earns its keep on jobs that get the promise wrong: each of examples/testing's wrong
 * jobs is caught within a bounded campaign from a fixed seed, shrunk to a scenario of a few steps, and its
 * seed and path replay the same failure.
 */
const ingest = (command: string): JobUnderTest => ({ command, producer: 'orders-ingest', assets: ['batch_ready'] });
const quiet = () => {};

const WRONG: { name: string; job: JobUnderTest; kinds: AnomalyKind[]; points?: typeof CONSUMER_POINTS }[] = [
  { name: 'a data write that appends instead of overwriting', job: ingest('examples/testing/wrong-append-job.ts'), kinds: ['data-differs', 'changed'] },
  { name: 'a payload that differs on a re-run (a clock in extra)', job: ingest('examples/testing/wrong-clock-job.ts'), kinds: ['changed'] },
  { name: 'an emission outside the checkpoint’s commit', job: ingest('examples/testing/wrong-outside-commit-job.ts'), kinds: ['checkpoint-ahead', 'lost'] },
  { name: 'a consumer’s effect outside ctx.commit', job: orderTotals('examples/testing/wrong-consumer-job.ts'), kinds: ['data-differs'], points: CONSUMER_POINTS },
];

describe('oncebox/testing on jobs that break the promise', () => {
  for (const { name, job, kinds, points } of WRONG) {
    it(`catches ${name}, shrinks it to a few steps, and replays it from its seed`, { timeout: 600_000 }, async () => {
      const seed = 20261202;
      const error = await checkJob(job, { runs: 30, seed, log: quiet, ...(points ? { points } : {}) }).then(
        () => undefined,
        (thrown: unknown) => thrown,
      );
      expect(error).toBeInstanceOf(JobCheckError);
      const failure = error as JobCheckError;
      console.log(`${name}:\n${failure.message}`);
      expect(failure.outcome.anomalies.some((anomaly) => kinds.includes(anomaly.kind)), failure.message).toBe(true);
      expect(failure.runsBeforeFailure).toBeLessThanOrEqual(30);
      expect(attemptsOf(failure.outcome.scenario).length).toBeLessThanOrEqual(3);
      expect(failure.message).toContain(`ONCEBOX_TESTING_SEED=${seed} ONCEBOX_TESTING_PATH=${failure.path}`);

      const replayed = await checkJob(job, { runs: 30, seed, path: failure.path, log: quiet, ...(points ? { points } : {}) }).then(
        () => undefined,
        (thrown: unknown) => thrown,
      );
      expect(replayed).toBeInstanceOf(JobCheckError);
      expect((replayed as JobCheckError).outcome.scenario).toEqual(failure.outcome.scenario);
      expect((replayed as JobCheckError).outcome.anomalies.map((anomaly) => anomaly.kind).sort()).toEqual(failure.outcome.anomalies.map((anomaly) => anomaly.kind).sort());
    });
  }
});
