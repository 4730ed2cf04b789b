import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ProblemCode } from '../protocol/errors.js';
import { problem, sendProblem } from './problem.js';
import { markAuthenticated } from './connections.js';
import { ADMIN_GRANT, describeGrant, hashToken, mayReadEvents, tokenId, type TokenGrant, type TokenRegistry } from './tokens.js';

/**
 * Who may call a route:
 * - `public`: anyone, with no token;
 * - `any`: any valid token (an unknown path, answered 404 once the token is checked);
 * - `publish`: a publish (or admin) token, which the handler then checks against the stream's producer;
 * - `events` (events and the asset list), `streams` (a stream's state): a token that may read them
 *   (read tokens as granted; a publish token reads its own producers' streams, which a retry on a fresh
 *   machine needs to resume);
 * - `catalog`: a token that may read both events and streams (the console's overview);
 * - `metrics`: a read token with reads `metrics` (a Prometheus scraper), or admin;
 * - `admin`: an admin token.
 * A route that names no access level is admin-only: deny by default.
 */
export type RouteAccess = 'public' | 'any' | 'publish' | 'events' | 'streams' | 'catalog' | 'metrics' | 'admin';

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: RouteAccess;
  }
  interface FastifyRequest {
    /** What the request's token may do; set by the auth hook before any handler runs. */
    grant: TokenGrant;
    /** Whom rate limits count the request against: `token:<id>`; empty on a server without tokens. */
    principal: string;
  }
}

export interface AuthOptions {
  /** The single token of earlier versions: an admin token, compared in constant time. */
  legacyToken?: string | undefined;
  tokens: TokenRegistry;
  /** How long a token's grant, or its absence, is trusted before the store is asked again. */
  cacheMs: number;
}

const MAX_CACHED = 10_000;

/**
 * Resolves bearer tokens to grants, with a short cache so that a request costs no store query: a
 * revocation takes effect on every instance within `cacheMs` (at once on the instance that revoked it).
 */
export class Authenticator {
  private readonly legacy: Buffer | undefined;
  private readonly cache = new Map<string, { grant: TokenGrant | undefined; until: number }>();
  // Once any token exists, the server asks for one for good: revoking every token must not open it.
  private required: boolean;
  private requiredCheckedUntil = 0;

  constructor(private readonly options: AuthOptions) {
    this.legacy = options.legacyToken === undefined ? undefined : Buffer.from(options.legacyToken);
    this.required = this.legacy !== undefined;
  }

  async isRequired(): Promise<boolean> {
    if (this.required || Date.now() < this.requiredCheckedUntil) return this.required;
    this.required = await this.options.tokens.any();
    this.requiredCheckedUntil = Date.now() + this.options.cacheMs;
    return this.required;
  }

  /** The grant of a presented token, or undefined when it is not a live token. */
  async grantFor(token: string): Promise<TokenGrant | undefined> {
    if (this.legacy !== undefined && tokenId(token) === undefined) {
      const given = Buffer.from(token);
      return given.length === this.legacy.length && timingSafeEqual(given, this.legacy) ? ADMIN_GRANT : undefined;
    }
    const hash = hashToken(token);
    const cached = this.cache.get(hash);
    if (cached && Date.now() < cached.until) return cached.grant;
    const grant = await this.options.tokens.grantFor(token);
    // A flood of made-up tokens must not grow the cache without bound.
    if (this.cache.size >= MAX_CACHED) this.cache.clear();
    this.cache.set(hash, { grant, until: Date.now() + this.options.cacheMs });
    return grant;
  }

  /** Forgets every cached grant, after a revocation on this instance. */
  forget(): void {
    this.cache.clear();
  }
}

/**
 * The auth hook. It runs after routing, on the route that will serve the request (never on the raw URL,
 * which a client can spell in many ways), and denies by default: an unknown path needs a token too, so
 * that a misspelt or encoded path tells nothing to a client without one.
 */
/**
 * What happens to requests without a live token, per source address: each is counted, and an address
 * past its allowance is answered 429 (with Retry-After) before its token is even looked up, so that
 * guessing tokens costs the guesser more than the server.
 */
export interface UnauthorizedLimit {
  /** Counts one refused request of the address; says when it is over its allowance, and for how long. */
  refused(request: FastifyRequest): Promise<{ retryAfterS: number } | undefined>;
}

export function useAuth(app: FastifyInstance, auth: Authenticator, limit?: () => UnauthorizedLimit | undefined): void {
  app.decorateRequest('grant', null as unknown as TokenGrant);
  app.decorateRequest('principal', '');
  // Addresses over their allowance of refused requests, until when (ms): no lookup for them till then.
  const barred = new Map<string, number>();
  app.addHook('onRequest', async (request, reply) => {
    const access: RouteAccess = request.is404 ? 'any' : (request.routeOptions.config.access ?? 'admin');
    // A request to a public route (a health check, the console's files) came whole: its connection is no
    // half-sent one, and is not closed under it for showing no token.
    if (access === 'public') {
      markAuthenticated(request.raw.socket);
      return;
    }
    if (!(await auth.isRequired())) {
      request.grant = ADMIN_GRANT;
      markAuthenticated(request.raw.socket);
      return;
    }
    const barredUntil = barred.get(request.ip);
    if (barredUntil !== undefined && Date.now() < barredUntil) return tooManyRefused(reply, Math.ceil((barredUntil - Date.now()) / 1000));
    if (barredUntil !== undefined) barred.delete(request.ip);
    const token = bearerToken(request);
    const grant = token === undefined ? undefined : await auth.grantFor(token);
    if (token === undefined || grant === undefined) {
      const over = await limit?.()?.refused(request);
      if (over !== undefined) {
        // A flood of addresses must not grow the map without bound.
        if (barred.size >= 10_000) barred.clear();
        barred.set(request.ip, Date.now() + over.retryAfterS * 1000);
        return tooManyRefused(reply, over.retryAfterS);
      }
      return sendProblem(
        reply,
        problem(401, ProblemCode.Unauthorized, 'send a live token as "Authorization: Bearer <token>" (oncebox token create makes one)'),
      );
    }
    request.grant = grant;
    request.principal = `token:${tokenId(token) ?? 'server'}`;
    markAuthenticated(request.raw.socket);
    if (!routeAllows(access, grant)) {
      return sendProblem(reply, forbidden(`this token may ${describeGrant(grant)}; ${ACCESS_NEEDS[access]}`));
    }
  });
}

function tooManyRefused(reply: FastifyReply, retryAfterS: number) {
  reply.header('retry-after', String(retryAfterS));
  return sendProblem(reply, problem(429, ProblemCode.RateLimited, `too many requests without a live token from this address; retry after ${retryAfterS} s with a token`));
}

const ACCESS_NEEDS: Record<RouteAccess, string> = {
  public: '',
  any: '',
  publish: 'publishing needs a publish token',
  events: 'reading events needs a read token with reads "events", or a publish token that consumes the asset (--consumes)',
  streams: 'reading stream state needs a publish token of that producer, or a read token with reads "streams"',
  catalog: 'the overview needs a token that reads both events and streams (oncebox token create --scope read --reads events,streams)',
  metrics: 'reading metrics needs a read token with reads "metrics"',
  admin: 'this needs an admin token',
};

function routeAllows(access: RouteAccess, grant: TokenGrant): boolean {
  if (grant.scope === 'admin' || access === 'any') return true;
  switch (access) {
    case 'publish':
      return grant.scope === 'publish';
    case 'events':
      return mayReadEvents(grant);
    case 'streams':
      return mayReadStreams(grant);
    case 'catalog':
      return mayReadEvents(grant) && mayReadStreams(grant);
    case 'metrics':
      return grant.scope === 'read' && grant.reads.includes('metrics');
    default:
      return false;
  }
}

function mayReadStreams(grant: TokenGrant): boolean {
  return grant.scope === 'publish' || (grant.scope === 'read' && grant.reads.includes('streams'));
}

export function forbidden(detail: string, field?: string) {
  return problem(403, ProblemCode.Forbidden, detail, field);
}

function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (header === undefined) return undefined;
  const match = /^Bearer +(\S+) *$/i.exec(header);
  return match?.[1];
}
