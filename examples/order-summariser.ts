/**
 * A read-process-emit consumer: for each "orders_ready" event it adds the partition to its own table of
 * counts and emits "orders_summarised" for the same partition, in one SQLite transaction with its cursor.
 * Killed at any point and restarted, on its file or on a fresh one, each event's effect is applied once
 * and each summary reaches the server once. The crash tests run it as a child process and kill it.
 *
 *   ONCEBOX_TOKEN=… tsx examples/order-summariser.ts --db FILE --server URL [--group summariser] [--source orders_ready]
 *     [--target orders_summarised] [--until CURSOR]
 *
 * Its token (ONCEBOX_TOKEN) is the group's: a publish token of producer "summariser" to the target asset
 * that consumes the source asset (docs/consumers.md, "Run the examples").
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { FencedError, openConsumer } from '../src/consumer/index.js';

const USAGE = 'usage: order-summariser --db FILE --server URL [--group NAME] [--source ASSET] [--target ASSET] [--until CURSOR]';

function parse() {
  try {
    return parseArgs({
      options: {
        db: { type: 'string' },
        server: { type: 'string' },
        group: { type: 'string', default: 'summariser' },
        source: { type: 'string', default: 'orders_ready' },
        target: { type: 'string', default: 'orders_summarised' },
        /** Stop once the cursor reaches this (the tests know how many events there are). */
        until: { type: 'string' },
        /** A pause after each event, so that a test can kill the consumer while its relay keeps up. */
        'pause-ms': { type: 'string', default: '0' },
        /** One row per delivery request, one at a time: a test can kill it between an emission's delivery and its cursor's. */
        'relay-one-row': { type: 'boolean', default: false },
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

const consumer = await openConsumer({
  path: args.db,
  server: args.server,
  group: args.group!,
  assets: [args.source!],
  waitSeconds: 1,
  // One row per request, one request at a time: a test can then kill it between two rows' delivery.
  relay: args['relay-one-row'] ? { batchMaxRows: 1, maxInFlight: 1 } : {},
}).catch((error: Error) => {
  console.error(`cannot start: ${error.message}`); // a refused token names its fix
  process.exit(1);
});
consumer.db.exec('CREATE TABLE IF NOT EXISTS order_counts (partition_key TEXT PRIMARY KEY, applied INTEGER NOT NULL)');
const addCount = consumer.db.prepare('INSERT INTO order_counts VALUES (?, 1) ON CONFLICT DO UPDATE SET applied = applied + 1');
// Where it resumed from: its own file's cursor, the server's copy (a fresh file), or the first event.
console.log(JSON.stringify({ event: 'start', epoch: consumer.epoch, cursor: consumer.cursor, resumedFrom: consumer.resumedFrom.source }));

const stop = new AbortController();
// Ctrl-C (or a supervisor's SIGTERM) stops it after the event in hand, with its file closed cleanly.
// Every time, not once: a second signal (a terminal's Ctrl-C passed on by a wrapper) must not kill it mid-close.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => stop.abort());
const pauseMs = Number(args['pause-ms']);
const until = args.until === undefined ? Number.POSITIVE_INFINITY : Number(args.until);
try {
  await consumer.run(
    async (event, ctx) => {
      ctx.commit((tx) => {
        addCount.run(event.partitionKey);
        tx.emit(args.target!, { partitionKey: event.partitionKey ?? undefined, extra: { source: event.eventId } });
      });
      console.log(JSON.stringify({ event: 'consumed', cursor: event.cursor, partitionKey: event.partitionKey }));
      if (event.cursor >= until) stop.abort();
      else await sleep(pauseMs);
    },
    { signal: stop.signal },
  );
} catch (error) {
  if (!(error instanceof FencedError)) throw error;
  console.log(JSON.stringify({ event: 'fenced', message: error.message }));
  await consumer.close({ timeoutMs: 0 });
  process.exit(3);
}
const cursor = consumer.cursor;
const closed = await consumer.close();
console.log(JSON.stringify({ event: 'done', cursor, pending: closed.pending }));
