import { OnceboxError } from '../protocol/errors.js';
import type { EmissionBatchResponse, ItemResult, Problem } from '../protocol/wire.js';

/**
 * A delivery attempt that got no per-item results. The relay retries every one of them with the same
 * keys: a timeout or a reset is "unknown" (the server may have stored the batch), and a refusal of the
 * whole request (401, 5xx, 429) says nothing about any item, so no row may be parked for it.
 * @internal
 */
export class DeliveryError extends OnceboxError {
  constructor(
    code: string,
    message: string,
    readonly details: { status?: number; retryAfterMs?: number; problem?: Problem } = {},
    options?: { cause?: unknown },
  ) {
    super(code, message, options);
  }
}

export interface TransportOptions {
  /** One server, or several instances of one server over a shared database, to fail over between. */
  servers: readonly string[];
  token?: string | undefined;
  requestTimeoutMs: number;
}

/**
 * Sends one batch to `POST /v1/emissions` and returns the server's per-item results. With several
 * servers it sends to one until a request fails, then moves to the next: the retry carries the same
 * keys and sequence numbers, and the instances share one store, so the order holds across them.
 * @internal
 */
export class HttpTransport {
  private readonly urls: string[];
  private readonly headers: Record<string, string>;
  private active = 0;

  constructor(private readonly options: TransportOptions) {
    if (options.servers.length === 0) throw new Error('HttpTransport: give at least one server');
    this.urls = options.servers.map((server) => apiUrl(server, 'v1/emissions').toString());
    this.headers = { 'content-type': 'application/json' };
    if (options.token !== undefined) this.headers.authorization = `Bearer ${options.token}`;
  }

  /** The server requests go to now. */
  get server(): string {
    return this.options.servers[this.active]!;
  }

  /** Sends a body made by encodeBatch; resolves to one result per item, in the items' order. */
  async send(body: string, itemCount: number, signal?: AbortSignal, headers: Record<string, string> = {}): Promise<ItemResult[]> {
    try {
      return await this.sendTo(this.urls[this.active]!, body, itemCount, signal, headers);
    } catch (error) {
      // Whatever went wrong (down, overloaded, refusing), the next attempt tries the next instance.
      if (error instanceof DeliveryError && this.urls.length > 1) this.active = (this.active + 1) % this.urls.length;
      throw error;
    }
  }

  private async sendTo(url: string, body: string, itemCount: number, signal: AbortSignal | undefined, extraHeaders: Record<string, string>): Promise<ItemResult[]> {
    const timeout = AbortSignal.timeout(this.options.requestTimeoutMs);
    let response: Response;
    let text: string;
    try {
      response = await fetch(url, {
        method: 'POST',
        headers: { ...this.headers, ...extraHeaders },
        body,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      text = await response.text();
    } catch (error) {
      const timedOut = timeout.aborted;
      throw new DeliveryError(
        timedOut ? 'timeout' : 'network',
        timedOut
          ? `no answer from ${url} within ${this.options.requestTimeoutMs} ms; the outcome is unknown, so the batch is resent with the same keys`
          : `could not reach ${url}: ${(error as Error).message}`,
        {},
        { cause: error },
      );
    }
    if (response.ok) {
      const answer = parseJson(text) as EmissionBatchResponse | undefined;
      if (!answer || !Array.isArray(answer.results) || answer.results.length !== itemCount) {
        throw new DeliveryError('bad_response', `${url} answered ${response.status} without one result per item`, {
          status: response.status,
        });
      }
      return answer.results;
    }
    const problem = parseJson(text) as Problem | undefined;
    const retryAfterMs = parseRetryAfter(response.headers.get('retry-after'));
    const detail = problem?.detail ?? text.slice(0, 200);
    const code = typeof problem?.code === 'string' ? problem.code : `http_${response.status}`;
    throw new DeliveryError(code, `${url} answered ${response.status}: ${detail}`, {
      status: response.status,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      ...(problem ? { problem } : {}),
    });
  }
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
