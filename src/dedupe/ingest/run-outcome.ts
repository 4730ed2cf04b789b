import { LifecycleAsset } from '../../protocol/lifecycle.js';
import type { StoredRunOutcome } from '../tables.js';
import type { NewEvent } from './resolve.js';

/**
 * What a request's new lifecycle events say of its run, for `streams.outcome`: a success ends it for
 * good, a failure ends it unless a retry is to come. Null when the request holds none (the run goes on
 * as it was). Only new events count: a duplicate said it the first time.
 */
export function runOutcomeOf(events: readonly NewEvent[]): StoredRunOutcome | null {
  let outcome: StoredRunOutcome | null = null;
  for (const { item } of events) {
    if (item.payload.asset === LifecycleAsset.Succeeded) return 'succeeded';
    if (item.payload.asset === LifecycleAsset.Failed) {
      // Checked on the way in (lifecycle-check.ts): a failure's extra always says whether a retry is to come.
      const { willRetry } = JSON.parse(item.payload.extra!) as { willRetry: boolean };
      outcome = willRetry ? 'retrying' : 'failed';
    }
  }
  return outcome;
}
