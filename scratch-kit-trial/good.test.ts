import { it } from 'vitest';
import { checkJob } from '../src/testing/index.js';

it('good job', async () => {
  await checkJob({ command: 'scratch-kit-trial/good-job.ts', producer: 'orders-ingest', assets: ['batch_ready'] }, { runs: Number(process.env.RUNS ?? 50), seed: 1 });
});
