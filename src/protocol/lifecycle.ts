import { z } from 'zod';
import { uuidOf } from './keys.js';
import { nameSchema } from './wire.js';

/**
 * The assets of run lifecycle events. A producer's terminal commit (`box.complete`, `box.fail`) emits
 * one of them, with a key that makes the server keep a run's success once and a failure once per attempt.
 * Every server knows them without registering them, and a token that may publish as a producer may
 * publish them for that producer's runs.
 */
export const LifecycleAsset = {
  Succeeded: 'oncebox.run_succeeded',
  Failed: 'oncebox.run_failed',
  /** An attempt that never ended (killed, or stalled and taken over) superseded by a later one. */
  Fenced: 'oncebox.run_fenced',
} as const;
export type LifecycleAsset = (typeof LifecycleAsset)[keyof typeof LifecycleAsset];

export function isLifecycleAsset(asset: string): asset is LifecycleAsset {
  return asset === LifecycleAsset.Succeeded || asset === LifecycleAsset.Failed || asset === LifecycleAsset.Fenced;
}

/** What a lifecycle event carries in `extra`. */
export interface LifecycleExtra {
  outcome: 'succeeded' | 'failed' | 'fenced';
  workflow: string;
  runId: string;
  task: string | null;
  /** The attempt that failed, or was fenced; absent on a success, which counts once per run whichever attempt made it. */
  attempt?: number;
  /** For a fenced attempt: the attempt that superseded it. */
  fencedBy?: number;
  /** Why the attempt failed, as `box.fail(error)` was given it. */
  error?: { message: string; code?: string };
  /** For a failure: whether a retry is to come (held emissions kept for it) or the run failed for good (discarded). */
  willRetry?: boolean;
  /** For a failure: how many emissions the run held, discarded unless a retry is to come. */
  held?: number;
}

/** Most characters of a failure's message a failure event carries. */
export const MAX_FAILURE_MESSAGE = 1000;
/** Most characters of a failure's error code a failure event carries. */
export const MAX_FAILURE_CODE = 200;

const run = { workflow: nameSchema, runId: nameSchema, task: nameSchema.nullable() };
const attempt = z.number().int().min(1);

/**
 * @internal The extra of each lifecycle event, exactly as a terminal commit writes it: the server checks
 * what it is sent against them, and the producer what it would send again.
 */
export const lifecycleExtraSchemas = {
  [LifecycleAsset.Succeeded]: z.strictObject({ outcome: z.literal('succeeded'), ...run }),
  [LifecycleAsset.Failed]: z.strictObject({
    outcome: z.literal('failed'),
    ...run,
    attempt,
    error: z.strictObject({ message: z.string().max(MAX_FAILURE_MESSAGE), code: z.string().max(MAX_FAILURE_CODE).optional() }),
    willRetry: z.boolean(),
    held: z.number().int().min(0),
  }),
  [LifecycleAsset.Fenced]: z.strictObject({ outcome: z.literal('fenced'), ...run, attempt, fencedBy: attempt }),
};

/**
 * The key of a run's lifecycle event: a success once per run (any attempt's success is the same event),
 * a failure, or a fence, once per attempt. The producer commits the event under it, and the server takes
 * the event only under it, so that no event can hold the key of another outcome.
 */
export function outcomeKey(
  producer: string,
  run: { workflow: string; runId: string; task?: string | null | undefined },
  outcome: 'succeeded' | 'failed' | 'fenced',
  attempt: number,
): string {
  const task = run.task === undefined || run.task === '' ? null : run.task;
  return uuidOf(['oncebox/v1/outcome', producer, run.workflow, run.runId, task, outcome, outcome === 'succeeded' ? null : attempt]);
}

/**
 * @internal Whether a lifecycle event, as an outbox row holds it (its asset, key and extra as JSON
 * text), says exactly what a terminal commit of `producer` writes: the server then refuses it only for
 * whom it is sent by, never for its content.
 */
export function isWellFormedNotice(producer: string, notice: { asset: string; key: string; extra: string | null }): boolean {
  if (!isLifecycleAsset(notice.asset)) return false;
  const parsed = lifecycleExtraSchemas[notice.asset].safeParse(notice.extra === null ? {} : JSON.parse(notice.extra));
  if (!parsed.success) return false;
  const extra = parsed.data as LifecycleExtra;
  return notice.key === outcomeKey(producer, extra, extra.outcome, extra.attempt ?? 0);
}
