import { z } from 'zod';
import { AirflowError, AirflowErrorCode } from './errors.js';
import { fetchWithin } from '../client/fetch-within.js';
import type { AirflowAssetEvent, AssetEventBody } from './event-body.js';

export type { AirflowAssetEvent } from './event-body.js';

/** How the forwarder signs in to Airflow: a user of its auth manager, or a token issued elsewhere (not renewed). */
export type AirflowCredentials = { username: string; password: string } | { token: string };

export interface AirflowClientOptions {
  /** Airflow's base URL, e.g. http://127.0.0.1:8080 (the API server). */
  url: string;
  credentials: AirflowCredentials;
  /** How long one request may take before its outcome counts as unknown. @defaultValue 10000 */
  requestTimeoutMs?: number;
  /** A token is renewed once less than this much of its life is left. @defaultValue 60000 */
  renewBeforeMs?: number;
  now?: () => number;
}


export interface AirflowAsset {
  id: number;
  name: string;
  uri: string;
}

const tokenAnswer = z.object({ access_token: z.string().min(1) });
const assetPage = z.object({ assets: z.array(z.object({ id: z.number(), name: z.string(), uri: z.string() })), total_entries: z.number() });
const assetEvent = z.looseObject({
  id: z.number(),
  asset_id: z.number(),
  partition_key: z.string().nullish(),
  extra: z.record(z.string(), z.unknown()).nullish(),
  created_dagruns: z.array(z.looseObject({ dag_id: z.string(), run_id: z.string() })),
  timestamp: z.string(),
});
const assetEventPage = z.object({ asset_events: z.array(assetEvent), total_entries: z.number() });

/**
 * An answer that leaves a request's outcome unknown: no answer (refused, reset, timed out) or a 5xx.
 * For a post, Airflow may have committed the event; the forwarder looks before posting again.
 */
export class OutcomeUnknown extends Error {
  constructor(
    readonly what: string,
    readonly detail: string,
    options?: { cause?: unknown },
  ) {
    super(`${what}: ${detail}`, options);
  }
}

/** How long a page of Airflow's lists is; its API caps `limit` at 100 by default. */
const PAGE = 100;

/**
 * A small client for the parts of Airflow 3's REST API the forwarder uses: its token endpoint, assets
 * and asset events. It keeps one Bearer JWT and renews it before it expires (and once more on a 401).
 * @internal
 */
export class AirflowClient {
  private readonly base: URL;
  private readonly timeoutMs: number;
  private readonly renewBeforeMs: number;
  private readonly now: () => number;
  private token: { value: string; renewAt: number } | undefined;
  private signingIn: Promise<string> | undefined;

  constructor(private readonly options: AirflowClientOptions) {
    this.base = new URL(options.url.endsWith('/') ? options.url : `${options.url}/`);
    this.timeoutMs = options.requestTimeoutMs ?? 10_000;
    this.renewBeforeMs = options.renewBeforeMs ?? 60_000;
    this.now = options.now ?? Date.now;
    if ('token' in options.credentials) this.token = { value: options.credentials.token, renewAt: Number.POSITIVE_INFINITY };
  }

  get url(): string {
    return this.base.href;
  }

  /** Signs in now: a wrong password or an unreachable Airflow shows at start, not at the first event. */
  async signIn(): Promise<void> {
    await this.bearer();
  }

  /**
   * The asset with exactly this name, or this URI; undefined when Airflow has none. A URI is looked up
   * as given, then as Airflow stores it (airflowNormalisedUri): `ceo://refunds` is `ceo://refunds/` there.
   */
  async findAsset(by: { name: string } | { uri: string }): Promise<AirflowAsset | undefined> {
    if ('name' in by) return this.findAssetBy('name', by.name);
    const normalised = airflowNormalisedUri(by.uri);
    return (await this.findAssetBy('uri', by.uri)) ?? (normalised === by.uri ? undefined : await this.findAssetBy('uri', normalised));
  }

  private async findAssetBy(field: 'name' | 'uri', value: string): Promise<AirflowAsset | undefined> {
    for (let offset = 0; ; offset += PAGE) {
      // The pattern is a substring match (ILIKE), so the page is filtered to the exact value here.
      const query = new URLSearchParams({ [`${field}_pattern`]: value, limit: String(PAGE), offset: String(offset) });
      const page = assetPage.parse(await this.request('GET', `api/v2/assets?${query}`, undefined, 'list assets'));
      const match = page.assets.find((asset) => asset[field] === value);
      if (match) return match;
      if (page.assets.length < PAGE) return undefined;
    }
  }

  /** Posts one asset event. Throws OutcomeUnknown when Airflow may or may not have committed it. */
  async postAssetEvent(body: AssetEventBody): Promise<AirflowAssetEvent> {
    return assetEvent.parse(await this.request('POST', 'api/v2/assets/events', body, 'post an asset event'));
  }

  /**
   * The first of an asset's events since `since` that `match` accepts, oldest first; undefined when none
   * does. Airflow cannot filter on `extra`, so the forwarder pages through the window.
   */
  async findAssetEvent(assetId: number, since: Date, match: (event: AirflowAssetEvent) => boolean): Promise<AirflowAssetEvent | undefined> {
    for (let offset = 0; ; offset += PAGE) {
      const query = new URLSearchParams({
        asset_id: String(assetId),
        timestamp_gte: since.toISOString(),
        order_by: 'timestamp',
        limit: String(PAGE),
        offset: String(offset),
      });
      const page = assetEventPage.parse(await this.request('GET', `api/v2/assets/events?${query}`, undefined, 'list asset events'));
      const found = page.asset_events.find(match);
      if (found) return found;
      if (page.asset_events.length < PAGE) return undefined;
    }
  }

  /** One request with the Bearer token; a 401 renews the token once (a 401 was not processed, so it is safe). */
  private async request(method: 'GET' | 'POST', path: string, body: unknown, what: string): Promise<unknown> {
    let { response, text } = await this.send(method, path, body, await this.bearer(), what);
    if (response.status === 401 && this.canRenew()) {
      this.token = undefined;
      ({ response, text } = await this.send(method, path, body, await this.bearer(), what));
    }
    if (response.ok) return JSON.parse(text);
    const detail = `${response.status} ${response.statusText}${text ? `: ${text.slice(0, 300)}` : ''}`;
    if (response.status >= 500) throw new OutcomeUnknown(`${what} at ${this.base.origin}`, detail);
    if (response.status === 401) {
      throw new AirflowError(AirflowErrorCode.Credentials, `Airflow at ${this.base.origin} refused the forwarder's token (${detail}); check its credentials`);
    }
    if (response.status === 403) {
      throw new AirflowError(AirflowErrorCode.Forbidden, `Airflow at ${this.base.origin} does not let the forwarder's user ${what} (${detail}); give it a role that may`);
    }
    throw new AirflowError(AirflowErrorCode.Rejected, `Airflow at ${this.base.origin} refused to ${what}: ${detail}`);
  }

  /** One request and its whole answer; no answer, or one cut off, leaves the outcome unknown. */
  private async send(method: string, path: string, body: unknown, token: string, what: string): Promise<{ response: Response; text: string }> {
    try {
      return await fetchWithin(
        new URL(path, this.base),
        {
          method,
          headers: { authorization: `Bearer ${token}`, accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          body: body === undefined ? undefined : JSON.stringify(body),
        },
        this.timeoutMs,
      );
    } catch (error) {
      throw new OutcomeUnknown(`${what} at ${this.base.origin}`, `no answer: ${describe(error)}`, { cause: error });
    }
  }

  private canRenew(): boolean {
    return 'username' in this.options.credentials;
  }

  /** The current token, signing in (once, however many requests wait) when there is none or it is about to expire. */
  private async bearer(): Promise<string> {
    if (this.token && this.now() < this.token.renewAt) return this.token.value;
    this.signingIn ??= this.signInNow().finally(() => (this.signingIn = undefined));
    return this.signingIn;
  }

  private async signInNow(): Promise<string> {
    const credentials = this.options.credentials;
    if (!('username' in credentials)) {
      throw new AirflowError(AirflowErrorCode.Credentials, `the Airflow token given to the forwarder has expired; give a new one, or a username and password so it can renew its own`);
    }
    const where = new URL('auth/token', this.base).href;
    let response: Response;
    let text: string;
    try {
      ({ response, text } = await fetchWithin(
        where,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json' },
          body: JSON.stringify({ username: credentials.username, password: credentials.password }),
        },
        this.timeoutMs,
      ));
    } catch (error) {
      // Mid-run, a token endpoint that does not answer is retried like any request; at start it is an error.
      throw new OutcomeUnknown(`reach Airflow at ${where}`, `no answer: ${describe(error)}`, { cause: error });
    }
    if (response.status === 401 || response.status === 400 || response.status === 403) {
      throw new AirflowError(
        AirflowErrorCode.Credentials,
        `Airflow at ${where} refused the credentials of user "${credentials.username}" (${response.status}); check the username and password the forwarder reads`,
      );
    }
    if (response.status >= 500) throw new OutcomeUnknown(`reach Airflow at ${where}`, `${response.status}: ${text.slice(0, 300)}`);
    if (!response.ok) {
      throw new AirflowError(AirflowErrorCode.Unreachable, `Airflow's token endpoint ${where} answered ${response.status}: ${text.slice(0, 300)}; is ${this.base.origin} an Airflow 3 API server?`);
    }
    const parsed = tokenAnswer.safeParse(safeJson(text));
    if (!parsed.success) {
      throw new AirflowError(AirflowErrorCode.Unreachable, `${where} did not answer with a token (is ${this.base.origin} an Airflow 3 API server?): ${text.slice(0, 200)}`);
    }
    const value = parsed.data.access_token;
    this.token = { value, renewAt: renewalTime(value, this.now(), this.renewBeforeMs) };
    return value;
  }
}

/**
 * When to renew a JWT: `renewBeforeMs` before its `exp`, or halfway through its life for a token too
 * short-lived for that margin. A token without a readable `exp` is kept until Airflow refuses it.
 */
export function renewalTime(jwt: string, now: number, renewBeforeMs: number): number {
  const payload = safeJson(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8'));
  const exp = (payload as { exp?: unknown } | undefined)?.exp;
  if (typeof exp !== 'number') return Number.POSITIVE_INFINITY;
  const expiresAt = exp * 1000;
  return Math.max(now, expiresAt - renewBeforeMs, now + (expiresAt - now) / 2);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  if (error.name === 'TimeoutError') return 'timed out';
  if (cause?.code && cause.message) return `${cause.code} (${cause.message})`;
  return cause?.code ?? cause?.message ?? error.message;
}

/**
 * A URI as Airflow stores an asset's (its `_sanitize_uri`): the scheme in lower case, a password's user
 * info dropped, trailing slashes stripped from the path and an empty path made `/`, the query's pairs
 * sorted (blank ones dropped), no fragment. A scheme starting with `x-`, and text that is no URI, stay
 * as they are. Providers' own rules for their schemes (a default port, say) are not applied: the
 * lookup's error says to give such a URI as Airflow lists it.
 * @internal
 */
export function airflowNormalisedUri(uri: string): string {
  const match = /^([A-Za-z][A-Za-z0-9+.-]*):(.*)$/s.exec(uri);
  if (match === null) return uri;
  const scheme = match[1]!.toLowerCase();
  if (scheme.startsWith('x-')) return uri;
  const withoutFragment = match[2]!.split('#')[0]!;
  const queryAt = withoutFragment.indexOf('?');
  const hierarchy = queryAt < 0 ? withoutFragment : withoutFragment.slice(0, queryAt);
  const query = queryAt < 0 ? '' : withoutFragment.slice(queryAt + 1);
  let authority: string | undefined;
  let path = hierarchy;
  if (hierarchy.startsWith('//')) {
    const slash = hierarchy.indexOf('/', 2);
    authority = slash < 0 ? hierarchy.slice(2) : hierarchy.slice(2, slash);
    path = slash < 0 ? '' : hierarchy.slice(slash);
    const at = authority.lastIndexOf('@');
    if (at >= 0 && authority.slice(0, at).includes(':')) authority = authority.slice(at + 1);
  }
  path = path.replace(/\/+$/, '') || '/';
  const pairs = [...new URLSearchParams(query)].filter(([, value]) => value !== '').sort(([a, x], [b, y]) => (a === b ? (x < y ? -1 : x > y ? 1 : 0) : a < b ? -1 : 1));
  const sortedQuery = new URLSearchParams(pairs).toString();
  return `${scheme}:${authority === undefined ? '' : `//${authority}`}${path}${sortedQuery ? `?${sortedQuery}` : ''}`;
}
