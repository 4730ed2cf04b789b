export { onceboxWorker, bullmqWillRetry, type OnceboxWorkerOptions, type OnceboxJobProcessor } from './worker.js';
export type { LockState } from './job-lock.js';
export { FencedError, RunEndedError, OnceboxError } from '../protocol/errors.js';
export type { Outbox } from '../outbox/outbox.js';
