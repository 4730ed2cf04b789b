/**
 * A per-partition trigger: "start the daily close once both orders and payments for a day are in". It
 * fires once per partition key, when every listed asset has an event for it, and emits the event that
 * starts the downstream work, in the transaction that consumes the completing event. A duplicate, or a
 * re-run's event for a day that already fired, does not fire it again.
 *
 *   ONCEBOX_TOKEN=… tsx examples/partition-trigger.ts --db FILE --server URL --when orders_ready,payments_ready --emit daily_close_ready [--until CURSOR]
 *
 * Its token (ONCEBOX_TOKEN) is the group's: a publish token of producer "daily-close" (the group) to the
 * emitted asset that consumes the assets of --when.
 */
import { parseArgs } from 'node:util';
import { openConsumer } from '../src/consumer/index.js';

const USAGE = 'usage: partition-trigger --db FILE --server URL [--group NAME] [--when A,B] [--emit ASSET] [--until CURSOR]';

function parse() {
  try {
    return parseArgs({
      options: {
        db: { type: 'string' },
        server: { type: 'string' },
        group: { type: 'string', default: 'daily-close' },
        when: { type: 'string', default: 'orders_ready,payments_ready' },
        emit: { type: 'string', default: 'daily_close_ready' },
        /** Stop once the cursor reaches this. */
        until: { type: 'string' },
      },
      strict: true,
    });
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    process.exit(2);
  }
}
const { values: args } = parse();
if (!args.db || !args.server) {
  console.error(USAGE);
  process.exit(2);
}
const when = args.when!.split(',');
const until = args.until === undefined ? Number.POSITIVE_INFINITY : Number(args.until);

const consumer = await openConsumer({ path: args.db, server: args.server, group: args.group!, assets: when, waitSeconds: 1 }).catch((error: Error) => {
  console.error(`cannot start: ${error.message}`); // a refused token names its fix
  process.exit(1);
});
console.log(JSON.stringify({ event: 'start', epoch: consumer.epoch, cursor: consumer.cursor, resumedFrom: consumer.resumedFrom.source }));
const stop = new AbortController();
// Ctrl-C (or a supervisor's SIGTERM) stops it after the event in hand, with its file closed cleanly.
// Every time, not once: a second signal (a terminal's Ctrl-C passed on by a wrapper) must not kill it mid-close.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => stop.abort());
consumer.trigger({ when, by: 'partitionKey' }, (partition, events, ctx) => {
  ctx.tx.emit(args.emit!, { partitionKey: partition, extra: { inputs: events.map((event) => event.eventId) } });
  console.log(JSON.stringify({ event: 'fired', partition, refresh: ctx.refresh }));
});
const watch = setInterval(() => {
  if (consumer.cursor >= until) stop.abort();
}, 20);
await consumer.run({ signal: stop.signal });
clearInterval(watch);
const cursor = consumer.cursor;
const { pending } = await consumer.close();
console.log(JSON.stringify({ event: 'done', cursor, pending }));
