import pRetry from 'p-retry';
import { fetchWithin, TimeoutError } from './fetch-within.js';
import { CredentialsError, OnceboxError, OptionsError } from '../protocol/errors.js';
import type { AttemptClaim, ClaimedAttempt, EmissionBatchResponse, EventPage, ItemResult, Problem, StreamState, TokenScopeAnswer } from '../protocol/wire.js';

/**
 * A request to the server that got no usable answer. For a delivery the relay retries every row of the
 * batch with the same keys: a timeout or a reset is "unknown" (the server may have stored the batch),
 * and a refusal of the whole request (401, 5xx, 429) says nothing about any item, so no row may be
 * parked for it.
 * @internal
 */
export class DeliveryError extends OnceboxError {
  constructor(
    code: string,
    message: string,
    readonly details: { status?: number; retryAfterMs?: number; problem?: Problem; url?: string } = {},
    options?: { cause?: unknown },
  ) {
    super(code, message, options);
  }
}

export interface ServerClientOptions {
  /** One server, or several instances of one server over a shared database, to fail over between. */
  servers: readonly string[];
  token?: string | undefined;
  requestTimeoutMs: number;
}

/** What one server answered. */
interface Answer {
  /** Which of the servers it was. */
  server: number;
  url: string;
  status: number;
  text: string;
  headers: Headers;
}

/** How long opening an outbox, a consumer or `oncebox relay` waits for the server to say whether it takes the token. */
export const TOKEN_CHECK_MS = 1000;

/**
 * The producer's one HTTP client for the server: URLs under a base path, the bearer token, timeouts,
 * failover between instances, and errors that say which URL answered what. With several servers it
 * talks to one until a request fails, then moves to the next: a retried delivery carries the same keys
 * and sequence numbers, and the instances share one store, so the order holds across them.
 * @internal
 */
export class ServerClient {
  private readonly headers: Record<string, string>;
  private active = 0;

  constructor(private readonly options: ServerClientOptions) {
    if (options.servers.length === 0) {
      throw new OptionsError('server', 'server: give at least one server URL (e.g. http://127.0.0.1:8181) to deliver to');
    }
    this.headers = options.token === undefined ? {} : { authorization: `Bearer ${options.token}` };
  }

  /** The server requests go to now. */
  get server(): string {
    return this.options.servers[this.active]!;
  }

  /**
   * Sends a body made by encodeBatch to `POST /v1/emissions`; resolves to one result per item, in the
   * items' order.
   */
  async sendEmissions(body: string, itemCount: number, signal?: AbortSignal, headers: Record<string, string> = {}): Promise<ItemResult[]> {
    const answer = await this.exchange('v1/emissions', { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } }, signal);
    if (answer.status !== 200) throw this.refusal(answer);
    const parsed = parseJson(answer.text) as EmissionBatchResponse | undefined;
    if (!parsed || !Array.isArray(parsed.results) || parsed.results.length !== itemCount) {
      throw this.fail(
        answer.server,
        new DeliveryError('bad_response', `${answer.url} answered ${answer.status} without one result per item`, { status: answer.status, url: answer.url }),
      );
    }
    return parsed.results;
  }

  /**
   * The server's state of one stream (`GET /v1/streams/…`), or undefined when it never delivered there.
   * Tries the servers in turn, with backoff, for up to `retryForMs`; the error then names every URL tried
   * and what each last answered.
   */
  async streamState(producer: string, runId: string, task: string | null, retryForMs: number): Promise<StreamState | undefined> {
    const route = streamStateRoute(producer, runId, task);
    return this.retrying(route, retryForMs, async () => {
      const answer = await this.exchange(route, { method: 'GET' });
      if (answer.status === 404) return undefined;
      if (answer.status !== 200) throw this.refusal(answer);
      return JSON.parse(answer.text) as StreamState;
    });
  }

  /**
   * Asks the server once, waiting at most `waitMs`, whether it takes this token to read a stream's state
   * (as a job and a consumer do) or an asset's events (as a consumer's reader does): throws
   * CredentialsError when it refuses it (401, 403). Any other outcome (the server down or slow, or no
   * such stream yet) says nothing about the token, and is left to the retries that follow.
   */
  async assertTokenAccepted(
    what: { stream: { producer: string; runId: string; task: string | null } } | { events: { asset: string | undefined } },
    waitMs: number,
  ): Promise<void> {
    const route =
      'stream' in what
        ? streamStateRoute(what.stream.producer, what.stream.runId, what.stream.task)
        : `v1/events?${new URLSearchParams({ after: '0', limit: '1', ...(what.events.asset === undefined ? {} : { asset: what.events.asset }) })}`;
    await this.probe(route, waitMs, 'events' in what ? 'reading' : 'publishing');
  }

  /**
   * A GET asked at start: CredentialsError when the server refuses the token (401, 403), the answer
   * otherwise, and undefined when none came in time (a server down or slow is the relay's to wait for).
   */
  private async probe(route: string, waitMs: number, purpose: Purpose): Promise<Answer | undefined> {
    let answer: Answer;
    try {
      answer = await this.exchange(route, { method: 'GET' }, AbortSignal.timeout(waitMs));
    } catch {
      return undefined;
    }
    if (answer.status === 401 || answer.status === 403) throw this.refusal(answer, purpose);
    return answer;
  }

  /**
   * Claims an attempt of a stream (`POST /v1/streams/…/attempts`): the next one, at least `atLeast`, or
   * `exactly` one, which the server grants only above the stream's epoch. Retried like streamState: a
   * claim whose answer was lost only leaves a gap in the attempt numbers (a lost `exactly` grant is
   * answered `taken` on the retry, and the caller claims a higher one). A refusal (409) is an answer, not
   * a failure: it comes back as `{ refused, epoch }`, at once.
   */
  async claimAttempt(
    producer: string,
    runId: string,
    task: string | null,
    claim: AttemptClaim,
    retryForMs: number,
  ): Promise<{ attempt: number } | { refused: 'attempt_taken' | 'attempt_too_high'; epoch: number; detail: string }> {
    const route = `${streamRoute(producer, runId)}/attempts`;
    const body = JSON.stringify({ task, ...claim });
    return this.retrying(route, retryForMs, async () => {
      const answer = await this.exchange(route, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
      if (answer.status === 409) {
        const problem = parseJson(answer.text) as Problem | undefined;
        if ((problem?.code === 'attempt_taken' || problem?.code === 'attempt_too_high') && typeof problem.epoch === 'number') {
          return { refused: problem.code, epoch: problem.epoch, detail: problem.detail };
        }
      }
      if (answer.status !== 201) throw this.refusal(answer);
      return { attempt: (JSON.parse(answer.text) as ClaimedAttempt).attempt };
    });
  }

  /**
   * Tries `request` on the servers in turn, with backoff, for up to `retryForMs`; the error then names
   * every URL tried and what each last answered.
   */
  private async retrying<T>(route: string, retryForMs: number, request: () => Promise<T>): Promise<T> {
    const lastFailure = new Map<string, string>();
    try {
      return await pRetry(request, {
        retries: Number.POSITIVE_INFINITY,
        minTimeout: 100,
        maxTimeout: 2000,
        randomize: true,
        maxRetryTime: retryForMs,
        shouldRetry: ({ error }) => !(error instanceof CredentialsError),
        onFailedAttempt: ({ error }) => {
          const url = error instanceof DeliveryError ? error.details.url : undefined;
          lastFailure.set(url ?? this.url(route), error.message);
        },
      });
    } catch (error) {
      if (error instanceof CredentialsError) throw error;
      const tried = [...lastFailure].map(([url, why]) => `${url}: ${why}`).join('; ');
      throw new DeliveryError('unreachable', `no server answered within ${retryForMs} ms (${tried || (error as Error).message})`, {}, { cause: error });
    }
  }

  /**
   * A page of stored events (`GET /v1/events`). With `waitS`, the server holds the answer up to that
   * many seconds for an event past `after` (long-poll); the request's timeout grows by as much.
   */
  async events(
    query: { asset?: string | undefined; after: number; limit?: number; waitS?: number; group?: { producer: string; group: string } },
    signal?: AbortSignal,
  ): Promise<EventPage> {
    const params = new URLSearchParams({ after: String(query.after) });
    if (query.asset !== undefined) params.set('asset', query.asset);
    // The group reading, for its last fetch in the server's catalog.
    if (query.group !== undefined) {
      params.set('group', query.group.group);
      if (query.group.producer !== query.group.group) params.set('groupProducer', query.group.producer);
    }
    if (query.limit !== undefined) params.set('limit', String(query.limit));
    if (query.waitS) params.set('wait', String(query.waitS));
    const answer = await this.exchange(`v1/events?${params}`, { method: 'GET' }, signal, (query.waitS ?? 0) * 1000);
    if (answer.status !== 200) throw this.refusal(answer, 'reading');
    return JSON.parse(answer.text) as EventPage;
  }

  /**
   * What this token may do (`GET /v1/token`), or undefined when the server cannot say: an older server
   * without the route, or one not reached (the checks that follow are the relay's). A refused token
   * throws CredentialsError.
   */
  async tokenScope(waitMs: number): Promise<TokenScopeAnswer | undefined> {
    const answer = await this.probe('v1/token', waitMs, 'publishing');
    return answer?.status === 200 ? (parseJson(answer.text) as TokenScopeAnswer | undefined) : undefined;
  }

  /**
   * What this token may do, refusing a read token: it passes the check of a stream (it may read the
   * stream's state) and would be refused only at the first delivery, after the job did its work.
   */
  async assertMayPublish(waitMs: number): Promise<TokenScopeAnswer | undefined> {
    const scope = await this.tokenScope(waitMs);
    if (scope?.scope === 'read') {
      throw credentialsRefused(403, this.url('v1/token'), 'this is a read token: it may read events and streams, and publish nothing', this.options.token !== undefined);
    }
    return scope;
  }

  /** The names of the assets the server accepts that this token may read (`GET /v1/assets`). */
  async assets(): Promise<string[]> {
    const answer = await this.exchange('v1/assets', { method: 'GET' });
    if (answer.status !== 200) throw this.refusal(answer, 'listing');
    return (JSON.parse(answer.text) as { assets: string[] }).assets;
  }

  /**
   * One answer of the catalog (`GET /v1/catalog…`): `path` under it, with the query's defined values.
   * A refused token is a CredentialsError; any other refusal a DeliveryError with the server's problem.
   */
  async catalog<Answer>(path: string, query: Record<string, string | number | undefined> = {}): Promise<Answer> {
    const params = new URLSearchParams(Object.entries(query).flatMap(([name, value]) => (value === undefined ? [] : [[name, String(value)] as [string, string]])));
    const answer = await this.exchange(`v1/catalog${path}${params.size === 0 ? '' : `?${params}`}`, { method: 'GET' });
    if (answer.status !== 200) throw this.refusal(answer, 'listing');
    return JSON.parse(answer.text) as Answer;
  }

  /** One request to the server in use; any failure moves later requests to the next server. */
  private async exchange(
    route: string,
    init: { method: string; body?: string; headers?: Record<string, string> },
    signal?: AbortSignal,
    /** How long the server may hold the answer on purpose (a long-poll), on top of the request timeout. */
    heldMs = 0,
  ): Promise<Answer> {
    const server = this.active;
    const url = this.url(route);
    try {
      const { response, text } = await fetchWithin(url, { ...init, headers: { ...this.headers, ...init.headers } }, this.options.requestTimeoutMs + heldMs, signal);
      return { server, url, status: response.status, text, headers: response.headers };
    } catch (error) {
      // Stopped by the caller (the outbox closing): not a failure of this server, and not worth recording.
      if (signal?.aborted) throw signal.reason ?? error;
      const timedOut = error instanceof TimeoutError;
      throw this.fail(
        server,
        new DeliveryError(
          timedOut ? 'timeout' : 'network',
          timedOut
            ? `no answer from ${url} within ${this.options.requestTimeoutMs} ms; the outcome is unknown, so the batch is resent with the same keys`
            : `could not reach ${url}: ${(error as Error).message}`,
          { url },
          { cause: error },
        ),
      );
    }
  }

  /**
   * A whole request refused: the problem's code, or `http_<status>` when the body is not a problem. A
   * refused token (401, 403) is a CredentialsError, which nobody retries: the same token gets the same
   * answer, and its message names the fix.
   */
  private refusal(answer: Answer, purpose: Purpose = 'publishing'): DeliveryError | CredentialsError {
    const problem = parseJson(answer.text) as Problem | undefined;
    const retryAfterMs = parseRetryAfter(answer.headers.get('retry-after'));
    const detail = problem?.detail ?? answer.text.slice(0, 200);
    if (answer.status === 401 || answer.status === 403) return credentialsRefused(answer.status, answer.url, detail, this.options.token !== undefined, purpose);
    const code = typeof problem?.code === 'string' ? problem.code : `http_${answer.status}`;
    return this.fail(
      answer.server,
      new DeliveryError(code, `${answer.url} answered ${answer.status}: ${detail}`, {
        status: answer.status,
        url: answer.url,
        ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
        ...(problem ? { problem } : {}),
      }),
    );
  }

  /**
   * Whatever went wrong (down, overloaded, refusing), the next request tries the next instance. Several
   * requests in flight to one server that all fail move on once, not once each.
   */
  private fail(server: number, error: DeliveryError): DeliveryError {
    if (this.active === server) this.active = (server + 1) % this.options.servers.length;
    return error;
  }

  private url(route: string): string {
    return apiUrl(this.server, route).toString();
  }
}

/** What a request is for: a refused token's message names the token that fits. */
type Purpose = 'publishing' | 'reading' | 'listing';
const NEEDED: Record<Purpose, string> = {
  publishing: 'a token that covers this producer and asset',
  reading: "a token that reads events (`--scope read --reads events`, or a consumer's `--consumes`)",
  listing: 'a token that reads events and streams (`--scope read --reads events,streams`)',
};

/**
 * What a 401 or 403 means for the one who must fix it. Jobs and consumers take their token from
 * ONCEBOX_TOKEN (or the `token` option), commands from --token-file or ONCEBOX_TOKEN.
 * @internal
 */
export function credentialsRefused(status: 401 | 403, url: string, detail: string, tokenGiven: boolean, purpose: Purpose = 'publishing'): CredentialsError {
  const where = 'set ONCEBOX_TOKEN (or pass `token` to openOutbox/openConsumer; a command takes --token-file FILE)';
  const needed = NEEDED[purpose];
  const fix =
    status === 403
      ? `the token is valid but does not cover this; create ${needed} with \`oncebox token create\` (docs/security.md) and ${where}`
      : tokenGiven
        ? `the server does not know this token (mistyped, revoked, or made for another server); ${where} to a token \`oncebox token list\` shows on this server`
        : `the server requires a token and none was given; ${where}`;
  const safe = purpose === 'publishing' ? '. Nothing pending is lost: a run with a good token delivers it' : '';
  return new CredentialsError(status, url, `${url} answered ${status} (${detail}): ${fix}${safe}`);
}

/**
 * A route of the API under a server URL. A path in the server URL is a base path (a server behind a
 * proxy at `https://host/oncebox`), kept rather than replaced.
 * @internal
 */
export function apiUrl(server: string, route: string): URL {
  return new URL(route, server.endsWith('/') ? server : `${server}/`);
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function parseRetryAfter(header: string | null): number | undefined {
  if (header === null) return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

function streamRoute(producer: string, runId: string): string {
  return `v1/streams/${encodeURIComponent(producer)}/${encodeURIComponent(runId)}`;
}

function streamStateRoute(producer: string, runId: string, task: string | null): string {
  return `${streamRoute(producer, runId)}${task === null ? '' : `?task=${encodeURIComponent(task)}`}`;
}
