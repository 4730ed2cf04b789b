import { LifecycleAsset } from '../../protocol/lifecycle.js';
import type { RunOutcome } from '../tables.js';
import type { NewEvent } from './resolve.js';

/**
 * What a request's new lifecycle events say of its run, for `streams.outcome`: a success ends it for
 * good, a failure ends it unless a retry is to come. Each says it as of the attempt it names (a success,
 * as of the attempt delivering it): the store keeps it only when no later attempt has spoken, so that a
 * failure of an earlier attempt delivered late (taken over by a retry on the same file, or sent again from
 * a dead row) never overwrites what a later one said. Null when the request holds none (the run goes on as
 * it was). Only new events count: a duplicate said it the first time.
 */
export function runOutcomeOf(events: readonly NewEvent[], attempt: number): RunOutcome | null {
  let outcome: RunOutcome | null = null;
  for (const { item } of events) {
    if (item.payload.asset === LifecycleAsset.Succeeded) return { outcome: 'succeeded', attempt };
    if (item.payload.asset === LifecycleAsset.Failed) {
      // Checked on the way in (lifecycle-check.ts): a failure's extra always names its attempt and says
      // whether a retry is to come.
      const failure = JSON.parse(item.payload.extra!) as { attempt: number; willRetry: boolean };
      if (outcome === null || failure.attempt >= outcome.attempt) outcome = { outcome: failure.willRetry ? 'retrying' : 'failed', attempt: failure.attempt };
    }
  }
  return outcome;
}
