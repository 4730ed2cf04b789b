import type { Problem } from '../protocol/wire.js';
import { ProblemCode } from '../protocol/errors.js';
import { problem } from './problem.js';

/** How many long-polls this instance holds at once, in all and per token. */
export interface LongPollLimits {
  /** Waiting readers in all; the rest of the connections stay free for publishers. */
  maxWaiters: number;
  /** Waiting readers of one token, so that one reader cannot take every waiter's place. */
  maxWaitersPerToken: number;
}

/** How long a refused reader is told to wait before it asks again, in seconds. */
const RETRY_AFTER_S = 1;

/**
 * Admits long-polls (`GET /v1/events?wait=`) within the limits, counting them per token: beyond the
 * token's share a reader gets 429 (`rate_limited`), beyond the instance's 503 (`overloaded`), each with
 * Retry-After, so that idle readers can never hold the connections publishers need.
 * @internal
 */
export class LongPolls {
  private total = 0;
  private readonly perToken = new Map<string, number>();

  constructor(private readonly limits: LongPollLimits) {}

  /**
   * Takes a place for a reader of `principal` ('' on a server without tokens, which counts only in all),
   * and returns its release; or the refusal, with the reason for the metrics.
   */
  admit(principal: string): { release: () => void } | { refused: 'token' | 'total'; problem: Problem; retryAfterS: number } {
    const mine = this.perToken.get(principal) ?? 0;
    if (principal !== '' && mine >= this.limits.maxWaitersPerToken) {
      return {
        refused: 'token',
        retryAfterS: RETRY_AFTER_S,
        problem: problem(
          429,
          ProblemCode.RateLimited,
          `this token already holds ${mine} waiting reads (wait=), the most one token may; read without wait, or share fewer readers per token`,
          'wait',
        ),
      };
    }
    if (this.total >= this.limits.maxWaiters) {
      return {
        refused: 'total',
        retryAfterS: RETRY_AFTER_S,
        problem: problem(503, ProblemCode.Overloaded, `this instance holds ${this.total} waiting reads (wait=), the most it takes; retry after ${RETRY_AFTER_S} s`, 'wait'),
      };
    }
    this.total++;
    if (principal !== '') this.perToken.set(principal, mine + 1);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.total--;
        if (principal === '') return;
        const left = (this.perToken.get(principal) ?? 1) - 1;
        if (left === 0) this.perToken.delete(principal);
        else this.perToken.set(principal, left);
      },
    };
  }
}
