import type { Registry } from 'prom-client';
import { z } from 'zod';
import { Limits } from '../protocol/limits.js';
import { resolveOptions } from '../protocol/options.js';
import type { Same } from '../protocol/same-type.js';
import { nameSchema } from '../protocol/wire.js';
import { RELAY_DEFAULTS } from './relay/defaults.js';
import type { RunContext } from './run.js';
import { loggerSchema, type OutboxLogger } from '../client/logger.js';
import { serversSchema } from '../client/server-urls.js';
import { tokenFromEnvironment } from '../client/token.js';

/** Validates RunOptions: each option is documented once, there; `Same` below ties the two. */
export const runContextSchema = z.strictObject({
  workflow: nameSchema,
  runId: nameSchema,
  task: nameSchema.optional(),
  // One check with one message per kind of mistake: a union's message would be its first branch's
  // ('expected "claim"'), whatever was given.
  attempt: z.custom<number | 'claim' | AttemptSource>(() => true).superRefine((value, ctx) => {
    const problem = attemptProblem(value);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  }),
});
export type { RunContext } from './run.js';

const ATTEMPT_KINDS = 'a number (the try number, 1 for the first try), "claim", or an attempt source with a next(floor) method';

/** What is wrong with a run's `attempt`, in words that say what to give instead; undefined when nothing is. */
function attemptProblem(value: unknown): string | undefined {
  if (value === 'claim') return undefined;
  if (value === undefined) return `is required: ${ATTEMPT_KINDS}`;
  if (typeof value === 'string') {
    // The usual source: an environment variable, which is text.
    if (/^\s*\d+\s*$/.test(value)) return `must be a number, not the string ${JSON.stringify(value)}: convert it, as in Number(process.env.ATTEMPT)`;
    return `must be ${ATTEMPT_KINDS} (got the string ${JSON.stringify(value.slice(0, 40))})`;
  }
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) return `must be a whole number: the try number, 1 for the first try (got ${value})`;
    if (value < 1) return 'must be at least 1 (the first try is attempt 1)';
    if (value > 1_000_000) return 'must be at most 1000000';
    return undefined;
  }
  if (typeof value === 'object' && value !== null && typeof (value as AttemptSource).next === 'function') return undefined;
  return `must be ${ATTEMPT_KINDS}`;
}

/**
 * An ordered source of attempt numbers kept outside oncebox, such as a job queue's counter raised under
 * the job's lock (the BullMQ adapter's). `openOutbox` claims exactly the number it proposes, and the
 * server grants it only while it is above the run's epoch: a claim that arrives late (its worker paused
 * between taking the number and claiming it) is refused rather than fencing the later one, and the
 * source is asked again, above the epoch.
 */
export interface AttemptSource {
  /**
   * The next attempt, above `floor`: the highest attempt of the run that the outbox file or the server has
   * seen. Throw to give up opening (say, the job's lock is lost); the error comes out of `openOutbox`.
   */
  next(floor: number): Promise<number>;
}

/** The run context `openOutbox` takes: a RunContext whose attempt may be claimed from the server. */
export interface RunOptions extends Omit<RunContext, 'attempt'> {
  /**
   * The try number, from 1, or 'claim': the server hands out the run's next attempt atomically, and it
   * fences every lower one at once. Use 'claim' where the job runner's attempt counter cannot be trusted
   * (two copies of a task may start with the same number, or a counter may go backwards). Or an
   * AttemptSource, whose numbers are claimed exactly.
   */
  attempt: number | 'claim' | AttemptSource;
}
const runContextIsDocumented: Same<RunOptions, z.infer<typeof runContextSchema>> = true;
void runContextIsDocumented;


/** Validates OutboxOptions: each option is documented once, there; `Same` below ties the two. */
const outboxOptionsSchema = z
  .strictObject({
    path: z.string().min(1),
    server: serversSchema.optional(),
    token: z.string().min(1).optional(),
    producer: nameSchema,
    run: runContextSchema.optional(),
    durability: z.enum(['full', 'normal']).default('full'),
    relay: z.enum(['in-process', 'external', 'manual']).default('in-process'),
    batchMaxRows: z.number().int().min(1).max(Limits.maxBatchItems).default(RELAY_DEFAULTS.batchMaxRows),
    batchMaxBytes: z.number().int().min(1024).max(Limits.maxBodyBytes).default(RELAY_DEFAULTS.batchMaxBytes),
    maxInFlight: z.number().int().min(1).max(64).default(RELAY_DEFAULTS.maxInFlight),
    requestTimeoutMs: z.number().int().min(1).default(RELAY_DEFAULTS.requestTimeoutMs),
    retryMinDelayMs: z.number().int().min(0).default(RELAY_DEFAULTS.retryMinDelayMs),
    retryMaxDelayMs: z.number().int().min(0).default(RELAY_DEFAULTS.retryMaxDelayMs),
    leaseTtlMs: z.number().int().min(30).default(RELAY_DEFAULTS.leaseTtlMs),
    pruneDeliveredAfterMs: z.number().int().min(0).nullable().default(RELAY_DEFAULTS.pruneDeliveredAfterMs),
    maxExtraBytes: z.number().int().min(2).max(Limits.maxExtraBytes).default(Limits.maxExtraBytes),
    resume: z.enum(['fresh-file', 'server-newer', 'never']).default('fresh-file'),
    noteFenced: z.boolean().default(false),
    resumeTimeoutMs: z.number().int().min(0).default(30_000),
    logger: loggerSchema.optional(),
    metrics: z
      .custom<Registry>((value) => typeof value === 'object' && value !== null && typeof (value as Registry).registerMetric === 'function', {
        error: "must be a prom-client Registry (import { Registry } from 'prom-client')",
      })
      .optional(),
    reportAfterMs: z.number().int().min(0).default(RELAY_DEFAULTS.reportAfterMs),
    logRepeatMs: z.number().int().min(0).default(RELAY_DEFAULTS.logRepeatMs),
    now: z.custom<() => number>((value) => typeof value === 'function', { error: 'must be a function returning ms since epoch' }).optional(),
  })
  .superRefine((options, ctx) => {
    if (options.relay !== 'external' && options.server === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['server'],
        message: `is required with relay: '${options.relay}'; give the server URL, or set relay: 'external' and run \`oncebox relay\``,
      });
    }
    if (options.run !== undefined && typeof options.run.attempt !== 'number' && options.server === undefined) {
      ctx.addIssue({ code: 'custom', path: ['run', 'attempt'], message: 'a claimed attempt is claimed from the server; give the server URL too' });
    }
    if (options.retryMaxDelayMs < options.retryMinDelayMs) {
      ctx.addIssue({ code: 'custom', path: ['retryMaxDelayMs'], message: 'must be at least retryMinDelayMs' });
    }
  });

/** What `openOutbox` takes. Every option but `path`, `producer` and (with an in-process relay) `server` has a default. */
export interface OutboxOptions {
  /** The outbox's SQLite file; created, with its folder, if missing. Give each producer its own file. */
  path: string;
  /**
   * The oncebox server the relay delivers to, or several instances of it over one PostgreSQL database,
   * to fail over between. A path in the URL is kept as a base path. Not needed with `relay: 'external'`.
   */
  server?: string | string[] | undefined;
  /**
   * Sent as `Authorization: Bearer <token>`: a publish token of this producer (`oncebox token create`).
   * @defaultValue the ONCEBOX_TOKEN environment variable, when set
   */
  token?: string | undefined;
  /** The job's name, e.g. "orders-ingest": part of every key and every event's provenance. */
  producer: string;
  /** Who is emitting. Without it the outbox can be read (status, checkpoints) but not committed to. */
  run?: RunOptions | undefined;
  /**
   * 'full' fsyncs every commit: a commit that returned survives power loss. 'normal' is about ten times
   * faster per commit but may lose the last commits on power loss (never on a process crash).
   * @defaultValue 'full'
   */
  durability?: 'full' | 'normal' | undefined;
  /**
   * 'in-process' runs the relay in this process, woken by each commit. 'external' leaves delivery to
   * `oncebox relay`. 'manual' runs nothing (oncebox's own tests drive the relay by hand).
   * @defaultValue 'in-process'
   */
  relay?: 'in-process' | 'external' | 'manual' | undefined;
  /** Most rows in one request (at most 1000). @defaultValue 500 */
  batchMaxRows?: number | undefined;
  /** Most bytes of payload in one request (at least 1 KiB, at most 8 MiB). @defaultValue 1 MiB */
  batchMaxBytes?: number | undefined;
  /**
   * Most requests of one stream in flight at once (1 to 64). They are sent in order and answered in any
   * order: one that reaches the server before the one ahead of it is answered with a gap and sent again,
   * so nothing is reordered. 1 sends one batch at a time. @defaultValue 4
   */
  maxInFlight?: number | undefined;
  /** After this long without an answer a request counts as "unknown" and is resent with the same keys. @defaultValue 10000 */
  requestTimeoutMs?: number | undefined;
  /** The shortest wait before a failed batch is sent again; waits double, with jitter, up to retryMaxDelayMs. @defaultValue 100 */
  retryMinDelayMs?: number | undefined;
  /** The longest wait between two tries of one batch; tries never stop. @defaultValue 5000 */
  retryMaxDelayMs?: number | undefined;
  /** How long a relay's lease lasts without renewal; a successor waits at most this long after a crash on another host. @defaultValue 15000 */
  leaseTtlMs?: number | undefined;
  /** Delivered rows older than this are pruned by the relay, so the file stays small; null keeps them. @defaultValue 7 days */
  pruneDeliveredAfterMs?: number | null | undefined;
  /** Largest `extra` accepted at commit, in bytes of canonical JSON (at most 64 KiB). @defaultValue 65536 */
  maxExtraBytes?: number | undefined;
  /**
   * When a retry (attempt > 1) adopts the server's copy of its run's checkpoints: 'fresh-file' (a new,
   * empty file: a retry on another machine), 'server-newer' (also when the server has seen a later
   * attempt than the file), or 'never'. @defaultValue 'fresh-file'
   */
  resume?: 'fresh-file' | 'server-newer' | 'never' | undefined;
  /**
   * When the last attempt that wrote to this file is older than this one and never ended (killed, or
   * stalled and taken over), record that on open as an `oncebox.run_fenced` lifecycle event, for the
   * notifiers' `onFenced`. The BullMQ adapter turns it on. @defaultValue false
   */
  noteFenced?: boolean | undefined;
  /** How long a retry on a fresh machine keeps trying to read its run's state before failing with ResumeUnavailableError. @defaultValue 30000 */
  resumeTimeoutMs?: number | undefined;
  /**
   * Where the outbox logs what a user must act on (delivery failing, dead rows, fences, rows left at
   * close): any pino-compatible logger. @defaultValue warnings and errors as JSON lines on stderr (level: ONCEBOX_LOG_LEVEL)
   */
  logger?: OutboxLogger | undefined;
  /**
   * A prom-client Registry to publish the outbox's metrics in (`oncebox_outbox_pending`, `_dead`,
   * `_delivered_total`, `_dead_total`, `_delivery_latency_seconds`, labelled by producer). None when not given.
   */
  metrics?: Registry | undefined;
  /** How long delivery may fail before it is logged and reported as an 'error' event. @defaultValue 5000 */
  reportAfterMs?: number | undefined;
  /** One cause is logged again at most this often, with the count of repeats in between. @defaultValue 60000 */
  logRepeatMs?: number | undefined;
  /** The relay's clock (ms since the epoch), for tests of lease expiry. */
  now?: (() => number) | undefined;
}
const outboxOptionsAreDocumented: Same<OutboxOptions, z.input<typeof outboxOptionsSchema>> = true;
void outboxOptionsAreDocumented;
export type ResolvedOutboxOptions = z.output<typeof outboxOptionsSchema>;

/** @internal Options whose run attempt is a number: given, or claimed from the server. */
export type ClaimedOptions = Omit<ResolvedOutboxOptions, 'run'> & { servers: string[]; run: RunContext | undefined };

export function resolveOutboxOptions(options: OutboxOptions): ResolvedOutboxOptions & { servers: string[] } {
  const resolved = resolveOptions(outboxOptionsSchema, options, 'openOutbox');
  const servers = resolved.server === undefined ? [] : typeof resolved.server === 'string' ? [resolved.server] : resolved.server;
  return { ...resolved, token: resolved.token ?? tokenFromEnvironment(), servers };
}
