/**
 * The console's one way to the server: the API beside the console (`../v1/…` from /console/, so a proxy
 * path in front of both works), with the read token in the Authorization header of every request and
 * never in a URL.
 */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }

  /** The token itself was refused (unknown, revoked, expired): the user must enter another. */
  get refusedToken(): boolean {
    return this.status === 401;
  }

  /**
   * The token may not read this. On one view (a link to another producer's run) that is the view's
   * answer; on what every view needs (the overview, the live poll) the token is of no use here.
   */
  get forbidden(): boolean {
    return this.status === 403;
  }
}

/** The URL of an API route, relative to where the console is served. */
export function apiUrl(route: string): string {
  return new URL(`../${route}`, window.location.href).toString();
}

export async function getJson<T>(route: string, token: string, signal?: AbortSignal): Promise<T> {
  let response: Response;
  try {
    response = await fetch(apiUrl(route), { headers: { authorization: `Bearer ${token}` }, ...(signal ? { signal } : {}) });
  } catch (error) {
    if (signal?.aborted) throw error;
    throw new ApiError(0, 'unreachable', `the server cannot be reached (${(error as Error).message})`);
  }
  const text = await response.text();
  if (!response.ok) {
    let problem: { code?: string; detail?: string } | undefined;
    try {
      problem = JSON.parse(text) as { code?: string; detail?: string };
    } catch {
      problem = undefined;
    }
    throw new ApiError(response.status, problem?.code ?? `http_${response.status}`, problem?.detail ?? `the server answered ${response.status}`);
  }
  return JSON.parse(text) as T;
}

/** A query string from the defined values, for a route. */
export function withQuery(route: string, query: Record<string, string | number | undefined | null>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
  const text = params.toString();
  return text === '' ? route : `${route}?${text}`;
}

/** A stream's route segment: producer and run, each encoded. */
export function streamPath(stream: { producer: string; runId: string; task: string | null }): string {
  const path = `/streams/${encodeURIComponent(stream.producer)}/${encodeURIComponent(stream.runId)}`;
  return stream.task === null ? path : `${path}?task=${encodeURIComponent(stream.task)}`;
}
