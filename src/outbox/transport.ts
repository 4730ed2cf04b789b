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
  server: string;
  token?: string | undefined;
  requestTimeoutMs: number;
}

/** Sends one batch to `POST /v1/emissions` and returns the server's per-item results. @internal */
export class HttpTransport {
  private readonly url: string;
  private readonly headers: Record<string, string>;

  constructor(private readonly options: TransportOptions) {
    this.url = new URL('/v1/emissions', options.server).toString();
    this.headers = { 'content-type': 'application/json' };
    if (options.token !== undefined) this.headers.authorization = `Bearer ${options.token}`;
  }

  /** Sends a body made by encodeBatch; resolves to one result per item, in the items' order. */
  async send(body: string, itemCount: number, signal?: AbortSignal): Promise<ItemResult[]> {
    const timeout = AbortSignal.timeout(this.options.requestTimeoutMs);
    let response: Response;
    let text: string;
    try {
      response = await fetch(this.url, {
        method: 'POST',
        headers: this.headers,
        body,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      text = await response.text();
    } catch (error) {
      const timedOut = timeout.aborted;
      throw new DeliveryError(
        timedOut ? 'timeout' : 'network',
        timedOut
          ? `no answer from ${this.url} within ${this.options.requestTimeoutMs} ms; the outcome is unknown, so the batch is resent with the same keys`
          : `could not reach ${this.url}: ${(error as Error).message}`,
        {},
        { cause: error },
      );
    }
    if (response.ok) {
      const answer = parseJson(text) as EmissionBatchResponse | undefined;
      if (!answer || !Array.isArray(answer.results) || answer.results.length !== itemCount) {
        throw new DeliveryError('bad_response', `${this.url} answered ${response.status} without one result per item`, {
          status: response.status,
        });
      }
      return answer.results;
    }
    const problem = parseJson(text) as Problem | undefined;
    const retryAfterMs = parseRetryAfter(response.headers.get('retry-after'));
    const detail = problem?.detail ?? text.slice(0, 200);
    const code = typeof problem?.code === 'string' ? problem.code : `http_${response.status}`;
    throw new DeliveryError(code, `${this.url} answered ${response.status}: ${detail}`, {
      status: response.status,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      ...(problem ? { problem } : {}),
    });
  }
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
