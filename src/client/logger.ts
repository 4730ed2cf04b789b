import { pino } from 'pino';
import { z } from 'zod';

/**
 * Where the producer side logs: any pino-compatible logger (pino itself, or an object with `warn`,
 * `error` and `info` taking a context object and a message). Each call names its cause in `code`.
 * The outbox, the consumer and the Airflow forwarder all take one.
 */
export interface OutboxLogger {
  info(context: object, message: string): void;
  warn(context: object, message: string): void;
  error(context: object, message: string): void;
}

/** @internal A pino-compatible logger, as the outbox, the consumer and the forwarder take it. */
export const loggerSchema = z.custom<OutboxLogger>(
  (value) => typeof value === 'object' && value !== null && ['info', 'warn', 'error'].every((level) => typeof (value as Record<string, unknown>)[level] === 'function'),
  { error: 'must be a pino-compatible logger: an object with info, warn and error methods' },
);

/**
 * The default logger: warnings and errors as JSON lines on stderr; `ONCEBOX_LOG_LEVEL` (a pino level, or
 * `silent`) changes the level.
 */
export function defaultLogger(): OutboxLogger {
  return pino({ name: 'oncebox', level: process.env.ONCEBOX_LOG_LEVEL ?? 'warn' }, pino.destination({ fd: 2, sync: true }));
}
