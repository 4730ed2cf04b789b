import { defaultLogger, type OutboxLogger } from '../../client/logger.js';
import type { OnceboxError } from '../../protocol/errors.js';
import type { TokenScopeAnswer } from '../../protocol/wire.js';
import { TOKEN_CHECK_MS, type ServerClient } from '../../client/server-client.js';
import { wireTask } from '../run.js';
import type { SettledRow } from '../events.js';
import type { OutboxFile, PendingRows } from '../file/outbox-file.js';
import type { DeliverySettings } from './defaults.js';
import { Relay } from './relay.js';
import { Reporter } from './reporter.js';

/** @internal The parts that deliver a file: the reporter, always; the relay, when this process delivers. */
export interface Delivery {
  reporter: Reporter;
  relay: Relay | undefined;
  logger: OutboxLogger;
}

/**
 * Builds the reporter and, given a client (`undefined` when another process delivers: `relay:
 * 'external'`), the relay of `file`.
 * @internal
 */
export function assembleDelivery(
  file: OutboxFile,
  settings: DeliverySettings,
  client: ServerClient | undefined,
  hooks: { pending: () => PendingRows; onSettled?: (rows: readonly SettledRow[]) => void; onStopped?: (error: OnceboxError) => void },
): Delivery {
  const logger = settings.logger ?? defaultLogger();
  const now = settings.now ?? Date.now;
  const reporter = new Reporter({ logger, failingAfterMs: settings.reportAfterMs, repeatMs: settings.logRepeatMs, pending: hooks.pending, now });
  const relay =
    client &&
    new Relay(file, {
      client,
      batchMaxRows: settings.batchMaxRows,
      batchMaxBytes: settings.batchMaxBytes,
      maxInFlight: settings.maxInFlight,
      retryMinDelayMs: settings.retryMinDelayMs,
      retryMaxDelayMs: settings.retryMaxDelayMs,
      leaseTtlMs: settings.leaseTtlMs,
      pruneDeliveredAfterMs: settings.pruneDeliveredAfterMs,
      now,
      onSettled: hooks.onSettled,
      onStopped: hooks.onStopped,
      reporter,
    });
  return { reporter, relay, logger };
}

/**
 * A token the server refuses is said at once, when a job's outbox or `oncebox relay` opens, with nothing
 * pending too, and so is a read token, which may read the stream but publish nothing; a server that is
 * down or slow is the relay's to wait for. Returns what the token may do, when the server said.
 * @internal
 */
export async function assertStreamToken(client: ServerClient, producer: string, run: { runId: string; task?: string | undefined }, requestTimeoutMs: number): Promise<TokenScopeAnswer | undefined> {
  const waitMs = Math.min(TOKEN_CHECK_MS, requestTimeoutMs);
  await client.assertTokenAccepted({ stream: { producer, runId: run.runId, task: wireTask(run.task) } }, waitMs);
  return client.assertMayPublish(waitMs);
}
