import { pino, type DestinationStream } from 'pino';
import { createRequire } from 'node:module';
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

const load = createRequire(import.meta.url);

/**
 * The default logger: warnings and errors on stderr; `ONCEBOX_LOG_LEVEL` (a pino level, or `silent`)
 * changes the level. Its lines are for whoever reads stderr (see logDestination).
 */
export function defaultLogger(): OutboxLogger {
  return pino({ name: 'oncebox', level: process.env.ONCEBOX_LOG_LEVEL ?? 'warn' }, logDestination());
}

/**
 * @internal Where log lines go, on stderr: one readable line each (time, level, message and its code)
 * when stderr is a terminal, a person's; JSON lines, one object each, when it is not (a file, a log
 * collector, a pipe). `ONCEBOX_LOG_FORMAT=json` or `pretty` says which, whatever stderr is.
 */
export function logDestination(env: NodeJS.ProcessEnv = process.env, stderr: { isTTY?: boolean } = process.stderr): DestinationStream {
  const format = env.ONCEBOX_LOG_FORMAT ?? (stderr.isTTY ? 'pretty' : 'json');
  if (format !== 'pretty') return pino.destination({ fd: 2, sync: true });
  // Loaded only for a person's terminal: a job under a supervisor starts without it.
  const { PinoPretty } = load('pino-pretty') as typeof import('pino-pretty');
  return PinoPretty({
    destination: 2,
    sync: true,
    colorize: stderr.isTTY === true && env.NO_COLOR === undefined,
    translateTime: 'SYS:HH:MM:ss',
    ignore: 'pid,hostname,name',
    // The message says it all for a person; the code is what to search the docs for.
    hideObject: true,
    messageFormat: '{msg}{if code} [{code}]{end}',
  });
}
