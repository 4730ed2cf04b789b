// The property test of consumer-job.ts: a consumer's effects and emissions, once each (docs/testing.md).
import { describe, it } from 'vitest';
import { CONSUMER_POINTS, checkJob, type JobUnderTest } from '../../src/testing/index.js';

/** Four orders as the consumer's input; it stops once it has consumed the last. */
export const orderTotals = (command: string): JobUnderTest => ({
  command,
  producer: 'order-totals',
  assets: ['orders_summarised'],
  consumes: ['orders_ready'],
  stream: { runId: 'order-totals' },
  setup: async (server) => {
    const events = await server.publish('orders_ready', ['order-10', 'order-20', 'order-30', 'order-40']);
    return { ONCEBOX_UNTIL_CURSOR: String(events.at(-1)!.cursor) };
  },
});

describe('the order-totals consumer', () => {
  it('applies each order once and summarises it once, whatever crashes or runs beside it', { timeout: 900_000 }, async () => {
    await checkJob(orderTotals('examples/testing/consumer-job.ts'), { runs: 30, seed: 20261202, points: CONSUMER_POINTS });
  });
});
