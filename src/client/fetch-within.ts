/**
 * `fetch`, with the answer's body read, that always settles within `timeoutMs` and keeps the process
 * alive until it does.
 *
 * Why not `AbortSignal.timeout`: its timer is unreferenced, and Node 20's fetch (undici) has a case where
 * a request holds nothing at all: a GET on a connection the other side closes before reading it (a server
 * restarting, a proxy cutting a kept-alive connection) neither settles nor keeps a live handle. With an
 * unreferenced timeout the event loop then empties, and a command whose only work was that request
 * exits 0 having done nothing (seen as `oncebox relay` ending at once, silent, with rows pending). A
 * referenced timer is what an answered request would have held anyway: the socket of a request in flight.
 */
export async function fetchWithin(url: string | URL, init: RequestInit, timeoutMs: number, signal?: AbortSignal): Promise<{ response: Response; text: string }> {
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort(new TimeoutError(`no answer within ${timeoutMs} ms`)), timeoutMs);
  try {
    const response = await fetch(url, { ...init, signal: signal ? AbortSignal.any([signal, timeout.signal]) : timeout.signal });
    return { response, text: await response.text() };
  } catch (error) {
    // Said as the timeout it was, whatever undici wraps it in.
    if (timeout.signal.aborted && !signal?.aborted) throw timeout.signal.reason as TimeoutError;
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/** A request that got no answer in time: its outcome is unknown. */
export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
}
