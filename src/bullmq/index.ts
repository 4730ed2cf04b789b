export { onceboxProcessor, type OnceboxProcessorOptions, type OnceboxJobProcessor } from './processor.js';
export { FencedError, RunEndedError, OnceboxError } from '../protocol/errors.js';
export type { Outbox } from '../outbox/outbox.js';
