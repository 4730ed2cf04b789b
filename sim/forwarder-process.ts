/**
 * A tenant's Airflow forwarder as a process of its own, for the simulation's kills at failpoints: it opens
 * the forwarder's file as the in-process one does, forwards until its cursor reaches `until`, and closes;
 * `ONCEBOX_FAILPOINT` kills it with SIGKILL where the simulation chose (`forward:before-post`,
 * `forward:after-post`).
 *
 *   tsx sim/forwarder-process.ts '<JSON of ForwarderProcessArgs>'
 */
import { openAirflowForwarder, type AirflowForwarderOptions } from '../src/airflow/index.js';
import { QUIET_LOGGER } from './world.js';

export interface ForwarderProcessArgs {
  options: Omit<AirflowForwarderOptions, 'logger'>;
  until: number;
}

const args = JSON.parse(process.argv[2]!) as ForwarderProcessArgs;
const forwarder = await openAirflowForwarder({ ...args.options, logger: QUIET_LOGGER });
const stop = new AbortController();
const watcher = setInterval(() => {
  if (forwarder.cursor >= args.until) stop.abort();
}, 5);
const result = await forwarder.run({ signal: stop.signal });
clearInterval(watcher);
const cursor = forwarder.cursor;
await forwarder.close({ timeoutMs: 30_000 });
console.log(JSON.stringify({ cursor, ...result }));
