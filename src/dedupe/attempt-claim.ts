import { MAX_ATTEMPT, type AttemptClaim } from '../protocol/wire.js';

export type { AttemptClaim };

/** What the server answers a claim: the attempt granted, or why none was. */
export type ClaimDecision =
  | { granted: number }
  | { refused: 'taken' | 'too_high'; epoch: number; detail: string };

/**
 * The one rule for attempt claims, which both stores apply under the stream's lock: a granted attempt
 * becomes the epoch at once (fencing every lower one), and no claim may move the epoch to where the
 * run's next delivery would be refused (more than `maxAttemptStep` above it, or past the last attempt).
 *
 * `exactly` is granted only above the epoch. A claim taken from an ordered source, such as a job queue's
 * counter raised under the job's lock, can then arrive late without fencing a later one: the later one
 * is already the epoch, and the late one is refused as taken.
 *
 * @param epoch the stream's epoch, 0 for a stream the server does not know.
 */
export function decideClaim(epoch: number, claim: AttemptClaim, maxAttemptStep: number): ClaimDecision {
  const wanted = 'exactly' in claim ? claim.exactly : Math.max(epoch + 1, claim.atLeast);
  if ('exactly' in claim && wanted <= epoch) {
    return { refused: 'taken', epoch, detail: `exactly: attempt ${wanted} is taken; this run's epoch is ${epoch} already. Claim a higher attempt` };
  }
  if (wanted > epoch + maxAttemptStep) {
    return {
      refused: 'too_high',
      epoch,
      detail:
        `attempt ${wanted} is more than ${maxAttemptStep} above this run's epoch (${epoch}): taking it would refuse every later ` +
        "delivery of the run. Claim a lower attempt (or raise the server's maxAttemptStep)",
    };
  }
  if (wanted > MAX_ATTEMPT) {
    return { refused: 'too_high', epoch, detail: `this run has reached the last attempt (${MAX_ATTEMPT}); start a new run id` };
  }
  return { granted: wanted };
}
