/**
 * A task's attempt as a process of its own, for the simulation's kills at failpoints: it opens the task's
 * outbox file as the given attempt, commits batches as the in-process jobs do, and drains its relay;
 * `ONCEBOX_FAILPOINT` kills it with SIGKILL where the simulation chose, throws a full disk's error there, or
 * stops it (SIGSTOP) for the simulation to continue once a retry has delivered: then it must learn that
 * it is fenced, and exits with 3. Its clock starts at the
 * simulation's and runs with real time, so that the leases it leaves lapse on the simulation's clock.
 *
 *   tsx sim/job-process.ts '<JSON of JobProcessArgs>'
 */
import { FencedError, openOutbox, OutboxWriteError } from '../src/outbox/index.js';
import { commitBatch, lastBatch, RUN_ID } from './batch.js';
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
  /** The job's new version, whose checkpoint has another shape. */
  newShape: boolean;
  /** Its tenant's tasks publish the same partitions. */
  sharedPartitions: boolean;
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
let commitErrors = 0;
let fenced = false;
// The relay learns of a fence on its own, while the job commits or as close() drains.
let toldFenced = false;
box.on('fenced', () => (toldFenced = true));
try {
  for (let done = 0; done < args.batches; ) {
    const before = lastBatch(box);
    try {
      committed = commitBatch(box, args.assets, args.task, { newShape: args.newShape, sharedPartitions: args.sharedPartitions }).batch;
      done++;
    } catch (error) {
      // A full disk (the failpoint's SQLITE_FULL), told as oncebox's typed error: the commit was rolled
      // back whole. A careful job tries the batch again; nothing of the failed commit may remain (G1).
      if (!(error instanceof OutboxWriteError) || error.sqliteCode !== 'SQLITE_FULL' || ++commitErrors > 3) throw error;
      if (lastBatch(box) !== before) throw new Error(`a failed commit moved the checkpoint from ${before} to ${lastBatch(box)}`);
    }
  }
} catch (error) {
  // A zombie thawed after its retry delivered: its commit is refused, and it stops, as a job does.
  if (!(error instanceof FencedError)) throw error;
  fenced = true;
}
const closed = await box.close({ timeoutMs: fenced ? 0 : 30_000 });
console.log(JSON.stringify({ committed, pending: closed.pending, commitErrors, fenced: fenced || toldFenced, lastError: closed.lastError?.code ?? null }));
process.exit(fenced ? 3 : 0);
