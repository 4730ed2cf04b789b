import { ProblemCode } from '../protocol/errors.js';
import { problem, RequestProblem } from './problem.js';

/**
 * How fast each token may open streams (runs) new to the store, on this instance: a token bucket per
 * token, `perMinute` deep and refilled at that rate. Stream state is kept until the run's retention, so
 * a token that opened them without limit would grow the store without limit. A server without tokens
 * has no one to count against.
 * @internal
 */
export class NewStreamLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly perMinute: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Takes one new stream from `principal`'s allowance, or throws the 429 to answer when it has none
   * left (a RequestProblem, which the error handler sends as it is).
   */
  take(principal: string): void {
    if (principal === '') return;
    const now = this.now();
    const bucket = this.buckets.get(principal) ?? { tokens: this.perMinute, at: now };
    bucket.tokens = Math.min(this.perMinute, bucket.tokens + ((now - bucket.at) * this.perMinute) / 60_000);
    bucket.at = now;
    if (bucket.tokens < 1) {
      this.buckets.set(principal, bucket);
      const waitS = Math.ceil(((1 - bucket.tokens) * 60_000) / this.perMinute / 1000);
      throw new NewStreamsExhausted(waitS, this.perMinute);
    }
    bucket.tokens -= 1;
    this.buckets.set(principal, bucket);
    // Full buckets say nothing a new one would not: forget them, so that the map stays small.
    if (this.buckets.size > 10_000) for (const [key, { tokens }] of this.buckets) if (tokens >= this.perMinute - 1) this.buckets.delete(key);
  }
}

/** The request would open a new stream, and its token has opened as many as it may for now. */
export class NewStreamsExhausted extends RequestProblem {
  constructor(
    readonly retryAfterS: number,
    perMinute: number,
  ) {
    super(
      problem(
        429,
        ProblemCode.RateLimited,
        `this token opened ${perMinute} new streams (runs) in the last minute, the most it may; retry after ${retryAfterS} s, or raise the server's newStreamsPerMinute`,
      ),
    );
  }
}
