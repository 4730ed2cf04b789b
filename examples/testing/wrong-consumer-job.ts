/**
 * WRONG, on purpose: the consumer adds each order to a running total kept outside the transaction that
 * advances its cursor: in a file of its data store, read, added to and written before `ctx.commit`. A
 * crash between the two applies the order again when the event comes back. `consumer-job.test.ts` shows
 * the testing kit catching it.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openConsumer } from '../../src/consumer/index.js';

const { ONCEBOX_OUTBOX, ONCEBOX_SERVER, ONCEBOX_DATA, ONCEBOX_UNTIL_CURSOR } = process.env;

const consumer = await openConsumer({ path: ONCEBOX_OUTBOX!, server: ONCEBOX_SERVER!, group: 'order-totals', assets: ['orders_ready'], waitSeconds: 0.2 });
const path = join(ONCEBOX_DATA!, 'total.json');
// It stops once it has consumed the test's last input event (ONCEBOX_UNTIL_CURSOR), however it got there.
const stop = new AbortController();
const watch = setInterval(() => consumer.cursor >= Number(ONCEBOX_UNTIL_CURSOR) && stop.abort(), 20);
await consumer.run(
  (event, ctx) => {
    mkdirSync(ONCEBOX_DATA!, { recursive: true });
    let orders = 0;
    try {
      orders = (JSON.parse(readFileSync(path, 'utf8')) as { orders: number }).orders;
    } catch {
      // no total yet
    }
    writeFileSync(path, JSON.stringify({ orders: orders + Number(event.partitionKey!.split('-')[1]) })); // the bug: outside ctx.commit
    ctx.commit((tx) => tx.emit('orders_summarised', { partitionKey: event.partitionKey! }));
  },
  { signal: stop.signal },
);
clearInterval(watch);
// 3 s for the relay to deliver; what it could not is delivered by the next run (the kit retries a run that failed).
const left = await consumer.close({ timeoutMs: 3000 });
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
