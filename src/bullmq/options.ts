import type { Job, WorkerOptions } from 'bullmq';
import { z } from 'zod';
import type { OutboxOptions } from '../outbox/options.js';
import { serversSchema } from '../client/server-urls.js';
import { resolveOptions } from '../protocol/options.js';
import type { Same } from '../protocol/same-type.js';
import { nameSchema } from '../protocol/wire.js';
import type { LockState } from './job-lock.js';

/** What `onceboxWorker` takes: where the jobs' outboxes go, the oncebox server, and BullMQ's own worker options. */
export interface OnceboxWorkerOptions {
  /** Where each job's outbox file goes (DIR/QUEUE/JOB.db), removed once the job is settled and its rows delivered. */
  dir: string;
  /** The oncebox server, or several instances over one PostgreSQL database. */
  server: string | string[];
  /** The producer name of the jobs' emissions. @defaultValue the queue name */
  producer?: string | undefined;
  /** A publish token of the producer. */
  token?: string | undefined;
  /** The task of the run context, when one queue runs several steps of a workflow. */
  task?: string | undefined;
  /**
   * Whether BullMQ will try the job again after this failure: the failure then keeps the job's held
   * emissions for the attempt that succeeds. `attemptsMade` is read from Redis while this worker still
   * holds the job's lock, so it is BullMQ's count as it is when BullMQ decides. One that throws is
   * logged, and BullMQ's own rule decides instead.
   * @defaultValue what BullMQ decides: false for an UnrecoverableError, else attemptsMade + 1 < opts.attempts
   */
  willRetry?: ((job: Job, error: unknown, state: LockState) => boolean) | undefined;
  /**
   * How long a settled job waits for its last rows to be delivered before it tells BullMQ, unless the
   * server is down: then it waits on, holding the job, until the server takes them or the worker closes.
   * @defaultValue 30000
   */
  closeTimeoutMs?: number | undefined;
  /** Other outbox options (logger, relay tuning, durability, metrics). */
  outbox?: Omit<OutboxOptions, 'path' | 'server' | 'producer' | 'run' | 'token' | 'resume'> | undefined;
  /**
   * BullMQ's worker options: `connection` (required), `lockDuration`, `stalledInterval`,
   * `maxStalledCount`, `concurrency`, and the rest. docs/runners.md says which values to pick.
   */
  worker: WorkerOptions;
}

const functionSchema = <F>(what: string) => z.custom<F>((value) => typeof value === 'function', { error: `must be a function: ${what}` });

/** Validates OnceboxWorkerOptions: each option is documented once, there; `Same` below ties the two. */
const onceboxWorkerOptionsSchema = z.strictObject({
  dir: z.string({ error: 'is required: the folder each job’s outbox file goes in' }).min(1),
  server: serversSchema,
  producer: nameSchema.optional(),
  token: z.string().min(1).optional(),
  task: nameSchema.optional(),
  willRetry: functionSchema<NonNullable<OnceboxWorkerOptions['willRetry']>>('(job, error, { attemptsMade, stalls }) => boolean').optional(),
  closeTimeoutMs: z.number().int().min(0).default(30_000),
  outbox: z.custom<NonNullable<OnceboxWorkerOptions['outbox']>>((value) => typeof value === 'object' && value !== null, { error: 'must be an object of outbox options' }).optional(),
  worker: z.custom<WorkerOptions>(
    (value) => typeof value === 'object' && value !== null && (value as WorkerOptions).connection !== undefined,
    { error: "must be BullMQ's worker options, with connection: the Redis connection BullMQ uses" },
  ),
});

/** The options of `onceboxWorker`, checked once, with defaults filled in. @internal */
export type ResolvedWorkerOptions = z.output<typeof onceboxWorkerOptionsSchema>;

/** @internal */
export function resolveWorkerOptions(options: OnceboxWorkerOptions): ResolvedWorkerOptions {
  return resolveOptions(onceboxWorkerOptionsSchema, options, 'onceboxWorker');
}

const optionsAreDocumented: Same<keyof OnceboxWorkerOptions, keyof z.input<typeof onceboxWorkerOptionsSchema>> = true;
void optionsAreDocumented;
