import type { JobUnderTest } from '../../src/testing/index.js';

/**
 * The order-totals consumer as the testing kit runs it: four orders as its input, published before each
 * run; it stops once it has consumed the last (ONCEBOX_UNTIL_CURSOR). `command` is the consumer's file:
 * consumer-job.ts, or a wrong one; `effects`, the query that lists the effects it keeps in its own file.
 */
export const orderTotals = (command: string, effects?: string): JobUnderTest => ({
  command,
  effects,
  producer: 'order-totals',
  assets: ['orders_summarised'],
  consumes: ['orders_ready'],
  stream: { runId: 'order-totals' },
  setup: async (server) => {
    const events = await server.publish('orders_ready', ['order-10', 'order-20', 'order-30', 'order-40']);
    return { ONCEBOX_UNTIL_CURSOR: String(events.at(-1)!.cursor) };
  },
});
