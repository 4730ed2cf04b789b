export { openOutbox, Outbox, Asset, type CloseOptions, type CloseResult } from './outbox.js';
export { CommitTransaction, Emission, type EmissionInput } from './commit.js';
export { Checkpoint } from '../checkpoint/checkpoint.js';
export type { OutboxOptions, RunContext } from './options.js';
export type { OutboxStatus, DeadRow } from './status.js';
export type { RelayError } from './relay.js';
export { ONCEBOX_KEY_NAMESPACE, deriveKey, explicitKey, type EmissionIdentity } from './keys.js';
export * from '../protocol/errors.js';
export type { Receipt, StoredEvent, EventPage } from '../protocol/wire.js';
