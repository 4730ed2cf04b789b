/**
 * A consumer group's consumer as a process of its own, for the simulation's kills at failpoints: it opens
 * the group's file as the in-process consumers do, with the same work, consumes until its cursor reaches
 * `until`, and drains its relay; `ONCEBOX_FAILPOINT` kills it with SIGKILL where the simulation chose.
 *
 *   tsx sim/consumer-process.ts '<JSON of ConsumerProcessArgs>'
 */
import { openGroupConsumer, type GroupSetup } from './groups.js';

export interface ConsumerProcessArgs extends GroupSetup {
  until: number;
}

const args = JSON.parse(process.argv[2]!) as ConsumerProcessArgs;
const { consumer, handler } = await openGroupConsumer(args);
const stop = new AbortController();
const watcher = setInterval(() => {
  if (consumer.cursor >= args.until) stop.abort();
}, 5);
if (handler === undefined) await consumer.run({ signal: stop.signal });
else await consumer.run(handler, { signal: stop.signal });
clearInterval(watcher);
const cursor = consumer.cursor;
const closed = await consumer.close({ timeoutMs: 30_000 });
console.log(JSON.stringify({ cursor, pending: closed.pending }));
