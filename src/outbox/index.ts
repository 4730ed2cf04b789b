/**
 * `oncebox`: the producer: openOutbox, the Outbox, commits, checkpoints, receipts and errors.
 * @packageDocumentation
 * @module oncebox
 */
export { openOutbox } from './open.js';
export { Outbox, type TerminalResult } from './outbox.js';
export type { CloseOptions, CloseResult } from './leftovers.js';
export { Asset } from './asset.js';
export { LifecycleAsset, isLifecycleAsset, type LifecycleExtra } from '../protocol/lifecycle.js';
export { CommitTransaction } from './commit/commit.js';
export { Emission, type EmissionInput } from './commit/emission.js';
export { Checkpoint } from '../checkpoint/checkpoint.js';
export type { OutboxOptions, RunContext, RunOptions, AttemptSource } from './options.js';
export { runFromEnvironment, scheduledRun, type RunDefaults, type ScheduledRunOptions } from './run-identity.js';
export type { OutboxStatus, DeadRow } from './status.js';
export type { RelayError } from './events.js';
export { ONCEBOX_KEY_NAMESPACE, deriveKey, explicitKey, type EmissionIdentity } from './commit/keys.js';
export * from '../protocol/errors.js';
export type { Receipt, StoredEvent, EventPage } from '../protocol/wire.js';
export type { OutboxLogger } from '../client/logger.js';
export type { OutboxEventMap, DeliveredNotice, DeadNotice, FencedNotice, DeliveryProblem } from './events.js';
