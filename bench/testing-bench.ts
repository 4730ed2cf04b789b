import { checkJob, type JobUnderTest } from '../src/testing/index.js';

/**
 * What a campaign of the testing kit costs: scenarios per minute for examples/testing/ingest-job.ts (each
 * a fresh server and the job run once per attempt, killed, stopped or retried as the scenario says), so
 * that a user knows what `checkJob({ runs })` will take. The clean run the kit keeps is made first, apart.
 */
export async function testingScenariosPerMinute(runs: number, seed: number): Promise<{ perMinute: number; runs: number }> {
  const job: JobUnderTest = { command: 'examples/testing/ingest-job.ts', producer: 'orders-ingest', assets: ['batch_ready', 'ingest_done'] };
  const quiet = () => {};
  await checkJob(job, { runs: 1, seed, log: quiet, maxAttempts: 1, zombies: false, maxFaults: 0 });
  const started = Date.now();
  const result = await checkJob(job, { runs, seed, log: quiet });
  return { perMinute: (result.runs / (Date.now() - started)) * 60_000, runs: result.runs };
}
