/**
 * `oncebox/bullmq`: the BullMQ adapter: a worker whose jobs are oncebox runs.
 * @packageDocumentation
 * @module oncebox/bullmq
 */
export { onceboxWorker } from './worker.js';
export type { OnceboxWorkerOptions } from './options.js';
export type { OnceboxJobProcessor } from './job-run.js';
export { bullmqWillRetry } from './outcome.js';
export type { LockState } from './job-lock.js';
export { FencedError, RunEndedError, OnceboxError } from '../protocol/errors.js';
export type { Outbox } from '../outbox/outbox.js';
