// The property test of consumer-job.ts: a consumer's effects and emissions, once each (docs/testing.md).
import { describe, it } from 'vitest';
import { CONSUMER_POINTS, checkJob } from '../../src/testing/index.js';
import { orderTotals } from './order-totals.js';

describe('the order-totals consumer', () => {
  it('applies each order once and summarises it once, whatever crashes or runs beside it', { timeout: 900_000 }, async () => {
    // Each order it applied is a row of its own file's `applied` table: the kit counts them against a clean run.
    await checkJob(orderTotals('examples/testing/consumer-job.ts', 'SELECT order_id FROM applied'), { runs: 20, seed: 20261202, points: CONSUMER_POINTS });
  });
});
