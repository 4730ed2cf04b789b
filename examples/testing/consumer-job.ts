/**
 * A consumer written the way oncebox asks, property-tested by `consumer-job.test.ts`: each order adds its
 * amount to a running total kept in the consumer's own file, in the transaction that advances its cursor
 * (`ctx.commit`), notes the order as applied, and emits a summary there too. The total it reports to its
 * data store is read back from what was committed, so writing it again changes nothing.
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openConsumer } from '../../src/consumer/index.js';

const { ONCEBOX_OUTBOX, ONCEBOX_SERVER, ONCEBOX_DATA, ONCEBOX_UNTIL_CURSOR } = process.env;

const consumer = await openConsumer({ path: ONCEBOX_OUTBOX!, server: ONCEBOX_SERVER!, group: 'order-totals', assets: ['orders_ready'], waitSeconds: 0.2 });
consumer.db.exec('CREATE TABLE IF NOT EXISTS totals (name TEXT PRIMARY KEY, amount INTEGER NOT NULL)');
consumer.db.exec('CREATE TABLE IF NOT EXISTS applied (order_id TEXT NOT NULL)');
const applied = consumer.db.prepare('INSERT INTO applied VALUES (?)');
const add = consumer.db.prepare("INSERT INTO totals VALUES ('orders', ?) ON CONFLICT DO UPDATE SET amount = amount + excluded.amount");
const total = () => (consumer.db.prepare("SELECT amount FROM totals WHERE name = 'orders'").pluck().get() as number | undefined) ?? 0;

function report(): void {
  mkdirSync(ONCEBOX_DATA!, { recursive: true });
  const path = join(ONCEBOX_DATA!, 'total.json');
  writeFileSync(`${path}.${process.pid}.tmp`, JSON.stringify({ orders: total() }));
  renameSync(`${path}.${process.pid}.tmp`, path);
}

// It stops once it has consumed the test's last input event (ONCEBOX_UNTIL_CURSOR), however it got there.
const stop = new AbortController();
const watch = setInterval(() => consumer.cursor >= Number(ONCEBOX_UNTIL_CURSOR) && stop.abort(), 20);
await consumer.run(
  (event, ctx) => {
    ctx.commit((tx) => {
      add.run(Number(event.partitionKey!.split('-')[1])); // the effect, with the cursor
      applied.run(event.partitionKey!);
      tx.emit('orders_summarised', { partitionKey: event.partitionKey! });
    });
    report();
  },
  { signal: stop.signal },
);
clearInterval(watch);
// A run killed after its last commit and before its report left the report behind: the totals of this
// file say what it is. (A fresh file holds none: the totals stayed on the lost machine with its report.)
if (total() > 0) report();
// 3 s for the relay to deliver; what it could not is delivered by the next run (the kit retries a run that failed).
const left = await consumer.close({ timeoutMs: 3000 });
process.exitCode = left.pending > 0 || left.dead > 0 ? 1 : 0;
