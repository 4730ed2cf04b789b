/** Delivery rounds without progress before the simulation calls a stream stuck: a liveness failure. */
export const STUCK_AFTER_ROUNDS = 60;

/**
 * Polls `found` until it gives something, for at most a minute of real time: what a relay running on its
 * own does is waited for, never timed; the minute only ends a wait that would never end (a liveness failure).
 */
export async function until<T>(found: () => T | undefined): Promise<T | undefined> {
  const end = Date.now() + 60_000;
  for (;;) {
    const value = found();
    if (value !== undefined || Date.now() > end) return value;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
