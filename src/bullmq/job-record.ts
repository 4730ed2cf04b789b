import { z } from 'zod';
import type { Checkpoint } from '../checkpoint/checkpoint.js';
import type { Outbox } from '../outbox/outbox.js';

/**
 * The adapter's record of a job, a checkpoint of its outbox: BullMQ's stall count of the job as the last
 * hand-out saw it, and the run's end once a terminal commit made one (a success, or a failure with no
 * retry to come). It is written at each hand-out and by the terminal commit, and mirrored to the server
 * like every checkpoint, so that the next hand-out finds it on the same file and on a fresh machine.
 *
 * The stall count is what tells the next hand-out what happened in between. BullMQ raises it when it
 * takes the job back from a worker that lost its lock (stalled, or died), and at no other time. So:
 * - more stalls than recorded, and an end: the end is oncebox's first and BullMQ's second, and the
 *   worker stopped in between; BullMQ never heard. The job is ended the same way, without running again.
 * - more stalls than recorded, and no end: the last hand-out's worker stalled or died mid-run; its
 *   attempt is noted as fenced, for the notifiers.
 * - as many stalls, and an end: the job came back after its end by a `job.retry()`; a new try.
 * - as many stalls, and no end: BullMQ retried a failure, or the job was delayed or moved by its own
 *   processor; neither is a fence.
 */
export const JOB_RECORD_CHECKPOINT = 'oncebox.bullmq';

const jobRecordSchema = z.object({
  /** BullMQ's stall count of the job when it was last written. */
  stalls: z.number().int(),
  /** The run's end, as the terminal commit made it; null while the run goes on. */
  end: z.object({ outcome: z.enum(['succeeded', 'failed']), attempt: z.number().int() }).nullable(),
});
export type JobRecord = z.infer<typeof jobRecordSchema>;
export type JobEnd = NonNullable<JobRecord['end']>;

/** @internal The job record of a job's outbox. */
export function jobRecord(box: Outbox): Checkpoint<JobRecord> {
  return box.checkpoint(JOB_RECORD_CHECKPOINT, jobRecordSchema);
}

/** What the record says of the hand-out that finds it, as above. */
export interface JobHistory {
  /** The end an earlier hand-out made, which BullMQ never heard of. */
  unheardEnd: JobEnd | undefined;
  /** Whether the last hand-out's worker stalled or died before it ended the run. */
  stalledSince: boolean;
}

/** @internal */
export function readJobHistory(box: Outbox, stalledCounter: number): JobHistory {
  const record = jobRecord(box).get();
  const stalledSince = stalledCounter > (record?.stalls ?? 0);
  return { unheardEnd: stalledSince && record?.end ? record.end : undefined, stalledSince: stalledSince && !record?.end };
}
