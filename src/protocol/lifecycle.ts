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
