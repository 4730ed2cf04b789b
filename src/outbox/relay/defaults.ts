import type { OutboxLogger } from '../../client/logger.js';

/** The relay's settings when nobody says otherwise; `openOutbox` and `oncebox relay` share them. */
export const RELAY_DEFAULTS = {
  batchMaxRows: 500,
  batchMaxBytes: 1024 * 1024,
  maxInFlight: 4,
  requestTimeoutMs: 10_000,
  retryMinDelayMs: 100,
  retryMaxDelayMs: 5_000,
  leaseTtlMs: 15_000,
  pruneDeliveredAfterMs: 7 * 24 * 60 * 60 * 1000,
  /** How long delivery may fail before it is logged and reported. */
  reportAfterMs: 5000,
  /** One cause is logged again at most this often. */
  logRepeatMs: 60_000,
} as const;

/**
 * What a relay and its reporter are built from: the options a job gave `openOutbox`, resolved, or
 * `oncebox relay`'s defaults (RELAY_DEFAULTS). Each is documented, once, on OutboxOptions.
 * @internal
 */
export interface DeliverySettings {
  batchMaxRows: number;
  batchMaxBytes: number;
  maxInFlight: number;
  retryMinDelayMs: number;
  retryMaxDelayMs: number;
  leaseTtlMs: number;
  pruneDeliveredAfterMs: number | null;
  reportAfterMs: number;
  logRepeatMs: number;
  logger?: OutboxLogger | undefined;
  now?: (() => number) | undefined;
}
