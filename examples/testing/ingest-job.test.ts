// The property test of ingest-job.ts, as a user writes one for their own job (docs/testing.md).
import { describe, it } from 'vitest';
import { checkJob } from '../../src/testing/index.js';

describe('the ingest job', () => {
  it('publishes each batch once and in order, whatever crashes, retries or runs beside it', { timeout: 900_000 }, async () => {
    await checkJob({ command: 'examples/testing/ingest-job.ts', producer: 'orders-ingest', assets: ['batch_ready', 'ingest_done'] }, { runs: 30, seed: 20261202 });
  });
});
