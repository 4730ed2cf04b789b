/**
 * A batch job with a lifecycle: each batch commits its checkpoint, a "batch_ready" event at once, and a
 * "run_done" event held for the run's success; then the job ends with `box.complete` (releasing the
 * held events, with one success event for the run) or, with --fail, `box.fail` (discarding them, with
 * one failure event for the attempt). The lifecycle tests SIGKILL it inside either.
 *
 *   tsx examples/lifecycle-job.ts --db FILE --server URL --run-id ID --attempt N [--batches 5] [--fail] [--fail-twice]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { FencedError, openOutbox } from '../src/outbox/index.js';

const { values: args } = parseArgs({
  options: {
    db: { type: 'string' },
    server: { type: 'string' },
    'run-id': { type: 'string', default: '2026-12-01' },
    attempt: { type: 'string', default: '1' },
    batches: { type: 'string', default: '5' },
    /** End with box.fail instead of box.complete. */
    fail: { type: 'boolean', default: false },
    /** Call the failure callback twice, as a runner that calls it again would. */
    'fail-twice': { type: 'boolean', default: false },
    /** Fail saying a retry is to come: the held events stay for it. */
    'will-retry': { type: 'boolean', default: false },
  },
  strict: true,
});
if (!args.db || !args.server) {
  console.error('usage: lifecycle-job --db FILE --server URL [--run-id ID] [--attempt N] [--batches N] [--fail]');
  process.exit(2);
}

const box = await openOutbox({
  path: args.db,
  server: args.server,
  producer: 'lifecycle-job',
  run: { workflow: 'orders', runId: args['run-id']!, task: 'ingest', attempt: Number(args.attempt) },
});
const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
const total = Number(args.batches);
const resumeFrom = progress.get()?.batch ?? 0;
console.log(JSON.stringify({ event: 'start', attempt: Number(args.attempt), resumeFrom, held: box.status().held }));
try {
  for (let batch = resumeFrom + 1; batch <= total; batch++) {
    box.commit((tx) => {
      tx.set(progress, { batch });
      tx.emit(box.asset('batch_ready'), { partitionKey: `batch-${batch}` });
      tx.emit(box.asset('run_done'), { partitionKey: `batch-${batch}`, on: 'success' });
    });
  }
  const failure = new Error(`source unavailable on attempt ${args.attempt}`);
  const willRetry = args['will-retry'];
  const ended = args.fail ? box.fail(failure, undefined, { willRetry }) : box.complete();
  if (args['fail-twice']) box.fail(failure, undefined, { willRetry });
  console.log(JSON.stringify({ event: 'ended', outcome: ended.outcome, recorded: ended.recorded }));
} catch (error) {
  if (!(error instanceof FencedError)) throw error;
  console.log(JSON.stringify({ event: 'fenced' }));
  await box.close({ timeoutMs: 0 });
  process.exit(3);
}
const { pending, dead } = await box.close({ timeoutMs: 30_000 });
console.log(JSON.stringify({ event: 'done', pending, dead }));
process.exit(pending === 0 && dead === 0 ? 0 : 1);
