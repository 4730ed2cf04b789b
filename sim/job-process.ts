/**
 * A task's attempt as a process of its own, for the simulation's kills at failpoints: it opens the task's
 * outbox file as the given attempt, commits batches as the in-process jobs do, and drains its relay;
 * `ONCEBOX_FAILPOINT` kills it with SIGKILL where the simulation chose. Its clock starts at the
 * simulation's and runs with real time, so that the leases it leaves lapse on the simulation's clock.
 *
 *   tsx sim/job-process.ts '<JSON of JobProcessArgs>'
 */
import { openOutbox } from '../src/outbox/index.js';
import { commitBatch, RUN_ID } from './batch.js';
import type { Tenant } from './world.js';

export interface JobProcessArgs {
  path: string;
  server: string;
  token: string;
  producer: string;
  task: string;
  attempt: number;
  resume: 'fresh-file' | 'server-newer';
  assets: Tenant['assets'];
  batches: number;
  clock: number;
  leaseTtlMs: number;
}

const args = JSON.parse(process.argv[2]!) as JobProcessArgs;
const started = Date.now();
const quiet = { info() {}, warn() {}, error() {} };
const box = await openOutbox({
  path: args.path,
  server: args.server,
  token: args.token,
  producer: args.producer,
  run: { workflow: 'sim', runId: RUN_ID, task: args.task, attempt: args.attempt },
  durability: 'normal',
  now: () => args.clock + (Date.now() - started),
  noteFenced: true,
  resume: args.resume,
  batchMaxRows: 3,
  retryMinDelayMs: 1,
  retryMaxDelayMs: 50,
  leaseTtlMs: args.leaseTtlMs,
  logger: quiet,
});
let committed = 0;
for (let i = 0; i < args.batches; i++) committed = commitBatch(box, args.assets, args.task).batch;
const closed = await box.close({ timeoutMs: 30_000 });
console.log(JSON.stringify({ committed, pending: closed.pending }));
