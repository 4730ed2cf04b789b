/**
 * `oncebox/consumer`: consumers: each event's effect once, per-partition triggers, notifiers.
 * @packageDocumentation
 * @module oncebox/consumer
 */
export {
  openConsumer,
  Consumer,
  type ConsumerOptions,
  type ConsumeContext,
  type EventHandler,
  type BatchHandler,
  type ConsumeOptions,
  type RunResult,
  type ConsumerStatus,
} from './consumer.js';
export { ConsumeTransaction, type CausedEmitOptions } from './consume-transaction.js';
export type { TriggerSpec, TriggerHandler, TriggerContext } from './triggers.js';
export { openNotifiers, Notifiers, webhookNotifier, WebhookRefusedError, type Notifier, type NotifierOptions, type LifecycleNotice, type WebhookOptions } from './notifiers.js';
export { LifecycleAsset, type LifecycleExtra } from '../protocol/lifecycle.js';
export type { Emission, EmissionInput } from '../outbox/commit/emission.js';
export type { CloseResult } from '../outbox/outbox.js';
export type { OutboxLogger } from '../client/logger.js';
export type { StoredEvent } from '../protocol/wire.js';
export * from '../protocol/errors.js';
