import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { UnrecoverableError, type Job } from 'bullmq';
import { Limits } from '../protocol/limits.js';

/** BullMQ's own key prefix, when a queue names none. */
const DEFAULT_PREFIX = 'bull';

/** A job as an oncebox run: its workflow and run id, and where its outbox file goes. */
export interface JobIdentity {
  /** The queue name, with its Redis key prefix when that is not BullMQ's default. */
  workflow: string;
  /**
   * The job id and the job's creation time (`ID@TIMESTAMP`, after the prefix when it is not BullMQ's
   * default): one job keeps it through its retries and stalls, and a job id used again (a custom id
   * added again after the first job was removed, or BullMQ's counter starting over after `obliterate()`)
   * is a new run.
   */
  runId: string;
  path: string;
}

/** The longest job id whose run id (`ID@TIMESTAMP`) still fits the protocol's names. */
const MAX_JOB_ID = Limits.maxNameLength - 20;

/** The longest prefix that still leaves room for such a job id. */
const MAX_PREFIX = 40;

/** @internal A job's run identity and outbox file; a job id too long to be a run id is a job that cannot run. */
export function jobIdentity(job: Job, dir: string, prefix: string | undefined): JobIdentity {
  const id = job.id!;
  if (prefix !== undefined && prefix.length > MAX_PREFIX) {
    throw new UnrecoverableError(`oncebox: the queue's prefix "${prefix.slice(0, 40)}…" is longer than ${MAX_PREFIX} characters; it is part of each run id`);
  }
  if (id.length > MAX_JOB_ID - (prefix?.length ?? 0)) {
    throw new UnrecoverableError(
      `oncebox: job id "${id.slice(0, 40)}…" is ${id.length} characters; an oncebox run id is the job id and its creation time, which fits ` +
        `job ids of at most ${MAX_JOB_ID - (prefix?.length ?? 0)} characters. Give the job a shorter id`,
    );
  }
  // A prefix of its own is part of both: the stream is keyed by run id, not by workflow.
  const own = prefix !== undefined && prefix !== DEFAULT_PREFIX ? `${prefix}:` : '';
  const workflow = `${own}${job.queueName}`;
  const runId = `${own}${id}@${job.timestamp}`;
  return { workflow, runId, path: join(dir, fileSafe(workflow), `${fileSafe(runId)}.db`) };
}

/** Names that are file names as they are: short, and of characters every file system takes. */
const PLAIN = /^[A-Za-z0-9._@-]{1,100}$/;

/**
 * A name as a file name: as it is when plain; else its plain characters, cut short, and a digest of the
 * whole name, so that two names never share a file and no name is too long for one.
 */
export function fileSafe(name: string): string {
  if (PLAIN.test(name) && name !== '.' && name !== '..') return name;
  const readable = name.replace(/[^A-Za-z0-9._@-]/g, '_').slice(0, 48);
  return `${readable}~${createHash('sha256').update(name).digest('hex').slice(0, 16)}`;
}
