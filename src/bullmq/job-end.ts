import { z } from 'zod';
import type { Checkpoint } from '../checkpoint/checkpoint.js';
import type { Outbox } from '../outbox/outbox.js';

/**
 * The adapter's record of a job's end, a checkpoint written in the terminal commit that ends the run (a
 * success, or a failure with no retry to come) and mirrored to the server like every checkpoint, so that
 * a later hand-out finds it on the same file and on a fresh machine.
 *
 * It answers one question: did BullMQ hear of that end? The end is oncebox's first, then BullMQ's, and a
 * worker can die (or lose the job's lock) in between. BullMQ then takes the job back as stalled, which
 * raises its stall count, and hands it out again. So a hand-out that finds the record with more stalls
 * than it says knows that BullMQ never heard, and ends the job the same way instead of running it again.
 * A hand-out that finds as many stalls is a `job.retry()` after the end: a new try, run as usual.
 */
export const JOB_END_CHECKPOINT = 'oncebox.bullmq.end';

const jobEndSchema = z.object({
  outcome: z.enum(['succeeded', 'failed']),
  /** The oncebox attempt whose terminal commit ended the run. */
  attempt: z.number().int(),
  /** BullMQ's stall count of the job when that attempt made the terminal commit. */
  stalls: z.number().int(),
});
export type JobEnd = z.infer<typeof jobEndSchema>;

/** @internal The job-end checkpoint of a job's outbox. */
export function jobEndCheckpoint(box: Outbox): Checkpoint<JobEnd> {
  return box.checkpoint(JOB_END_CHECKPOINT, jobEndSchema);
}

/** @internal The end an earlier hand-out recorded and BullMQ never heard of, if this hand-out's stall count says so. */
export function unheardEnd(box: Outbox, stalledCounter: number): JobEnd | undefined {
  const end = jobEndCheckpoint(box).get();
  return end !== undefined && stalledCounter > end.stalls ? end : undefined;
}
