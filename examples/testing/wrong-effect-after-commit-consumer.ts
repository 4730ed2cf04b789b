/**
 * WRONG, on purpose: the consumer notes each order as applied in its own file, but in a statement of its
 * own after `ctx.commit`, not inside it. Killed between the two, the cursor has moved past the order and
 * its note is never written: the effect is lost. `test/testing/wrong-jobs.test.ts` shows the testing kit
 * catching it through the effects the job declares (`effects: 'SELECT order_id FROM applied'`).
 */
import { openConsumer } from '../../src/consumer/index.js';

const { ONCEBOX_OUTBOX, ONCEBOX_SERVER, ONCEBOX_UNTIL_CURSOR } = process.env;

const consumer = await openConsumer({ path: ONCEBOX_OUTBOX!, server: ONCEBOX_SERVER!, group: 'order-totals', assets: ['orders_ready'], waitSeconds: 0.2 });
consumer.db.exec('CREATE TABLE IF NOT EXISTS applied (order_id TEXT NOT NULL)');
const applied = consumer.db.prepare('INSERT INTO applied VALUES (?)');
// It stops once it has consumed the test's last input event (ONCEBOX_UNTIL_CURSOR), however it got there.
const stop = new AbortController();
const watch = setInterval(() => consumer.cursor >= Number(ONCEBOX_UNTIL_CURSOR) && stop.abort(), 20);
await consumer.run(
  (event, ctx) => {
    ctx.commit((tx) => tx.emit('orders_summarised', { partitionKey: event.partitionKey! }));
    applied.run(event.partitionKey!); // the bug: the effect after ctx.commit, in a transaction of its own
  },
  { signal: stop.signal },
);
clearInterval(watch);
const left = await consumer.close({ timeoutMs: 3000 });
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
