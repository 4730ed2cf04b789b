import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProblemCode, RejectionCode } from '../../src/protocol/errors.js';
import { rawRequest } from '../support/http.js';
import { pgAvailable, pgSkipReason } from '../support/postgres.js';
import { startServer, type Backend } from '../support/server.js';

/**
 * A generated hostile-input campaign against each store: fast-check builds whole requests (method,
 * target, headers, envelope, items, Unicode, numbers, nesting and sizes), and every answer must be below
 * 500; a refusal must be problem+json with a known code; a per-item rejection must carry a known code;
 * and a refused request must leave the store as it was. The seed is printed; ONCEBOX_SEED replays it,
 * and `npm run fuzz -- --requests N` runs a long campaign.
 */
const SEED = Number(process.env.ONCEBOX_SEED ?? Date.now() % 2 ** 31);
const REQUESTS = Number(process.env.ONCEBOX_FUZZ_REQUESTS ?? 1500);
const PROBLEM_CODES = new Set<string>(Object.values(ProblemCode));
const REJECTION_CODES = new Set<string>([...Object.values(RejectionCode), 'key_conflict']);

const nasty = fc.constantFrom('', '\u0000', 'a\u0000b', '\ud800', '\udfff', 'x\ud83d', '😀', '%', '%zz', '..', '/', '\\', '__proto__', 'constructor', 'x'.repeat(300), 'é', '\u202e', ' ');
const text = fc.oneof(fc.string({ maxLength: 20 }), fc.string({ unit: 'binary', maxLength: 20 }), nasty);
const number = fc.oneof(fc.integer(), fc.constantFrom(0, -1, 1.5, 2 ** 53, 1e308, -0), fc.double());
const scalar = fc.oneof(text, number, fc.boolean(), fc.constant(null));
const json = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, scalar, fc.array(tie('value'), { maxLength: 3 }), fc.dictionary(text, tie('value'), { maxKeys: 3 })),
})).value;

/** Mostly the good value, so that requests get past the envelope and reach the items and the store. */
const anyOf = <T>(good: fc.Arbitrary<T>, bad: fc.Arbitrary<unknown>) => fc.oneof({ arbitrary: good, weight: 9 }, { arbitrary: bad, weight: 1 });
const stream = fc.record(
  {
    producer: anyOf(fc.constantFrom('p', 'q'), text),
    workflow: anyOf(fc.constant('w'), text),
    runId: anyOf(fc.uuid(), text),
    task: anyOf(fc.constant(null), fc.oneof(text, number)),
    attempt: anyOf(fc.integer({ min: 1, max: 3 }), fc.oneof(number, text)),
  },
  { requiredKeys: ['producer', 'workflow', 'runId', 'task', 'attempt'] },
);
const eventItem = fc.record(
  {
    seq: anyOf(fc.constant(0), fc.oneof(number, text)), // 0: numbered in order below
    key: anyOf(fc.uuid(), fc.oneof(text, fc.constant(null))),
    kind: anyOf(fc.constant('event'), text),
    asset: anyOf(fc.constant('batch_ready'), text),
    partitionKey: anyOf(fc.constantFrom('p-1', 'p-2', 'p-3'), fc.oneof(text, number)),
    partitionDate: anyOf(fc.constant('2026-11-30T00:00:00Z'), fc.oneof(fc.constant('2026-02-30T00:00:00Z'), text)),
    extra: anyOf(fc.dictionary(fc.constantFrom('rows', 'note', 'ref'), scalar, { maxKeys: 3 }), json),
  },
  { requiredKeys: ['seq', 'key', 'kind', 'asset'] },
);
const checkpointItem = fc.record(
  {
    seq: anyOf(fc.constant(0), fc.oneof(number, text)),
    key: anyOf(fc.uuid(), text),
    kind: fc.constant('checkpoint'),
    name: anyOf(fc.constant('backlog'), text),
    value: json,
  },
  { requiredKeys: ['seq', 'key', 'kind', 'name'] },
);
const itemArb = fc.oneof(
  { arbitrary: eventItem, weight: 6 },
  { arbitrary: checkpointItem, weight: 2 },
  { arbitrary: fc.tuple(eventItem, text, scalar).map(([item, name, value]) => ({ ...item, [name]: value })), weight: 1 },
);
const items = fc
  .array(fc.oneof({ arbitrary: itemArb, weight: 9 }, { arbitrary: json, weight: 1 }), { minLength: 1, maxLength: 6 })
  .map((list) => list.map((item, i) => (item !== null && typeof item === 'object' && (item as { seq?: unknown }).seq === 0 ? { ...item, seq: i + 1 } : item)));
const body = fc.oneof(
  { arbitrary: fc.record({ stream, items }, { requiredKeys: ['stream', 'items'] }).map((b) => JSON.stringify(b)), weight: 8 },
  { arbitrary: fc.record({ stream, items }, { requiredKeys: [] }).map((b) => JSON.stringify(b)), weight: 1 },
  { arbitrary: json.map((value) => JSON.stringify(value) ?? 'null'), weight: 1 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 50 }), weight: 1 },
  { arbitrary: fc.nat({ max: 5000 }).map((depth) => `{"stream":{},"items":${'['.repeat(depth)}${']'.repeat(depth)}}`), weight: 1 },
);
const path = fc.oneof(
  { arbitrary: fc.constantFrom('/v1/emissions', '/v1/events', '/v1/assets', '/v1/streams/p/fuzz', '/healthz'), weight: 4 },
  { arbitrary: fc.tuple(fc.constantFrom('/v1/streams/', '/v1/assets/', '/v1/events?asset=', '/v1/events?after=', '/v1/streams/p/r?task='), text).map(([head, tail]) => head + encodeURIComponentLoose(tail)), weight: 3 },
  { arbitrary: fc.constantFrom('/%761/emissions', '//v1/events', '/v1/./assets', 'http://x/v1/events', '/v1/%ED%A0%80', '/v1/%', `/v1/streams/${'p'.repeat(300)}/r`, '/v1/events?limit=1000&after=-1'), weight: 1 },
);
const contentType = fc.constantFrom('application/json', 'application/json; charset=utf-8', 'application/json; charset=utf-16', 'text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=', undefined);
const requestArb = fc.oneof(
  // Emissions, mostly well enough formed to reach the items and the store.
  {
    arbitrary: fc.record({
      method: fc.constant('POST'),
      path: fc.constant('/v1/emissions'),
      contentType: fc.oneof({ arbitrary: fc.constant('application/json'), weight: 9 }, { arbitrary: contentType, weight: 1 }),
      body,
    }),
    weight: 6,
  },
  // Reads with hostile targets and queries.
  { arbitrary: fc.record({ method: fc.constant('GET'), path, contentType: fc.constant(undefined), body: fc.constant('') }), weight: 2 },
  { arbitrary: fc.record({ method: fc.constant('PUT'), path: text.map((name) => `/v1/assets/${encodeURIComponentLoose(name)}`), contentType: fc.constant(undefined), body: fc.constant('') }), weight: 1 },
  // Anything at all.
  { arbitrary: fc.record({ method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH'), path, contentType, body }), weight: 1 },
);

/** Percent-encodes what a URL cannot hold, leaving the rest as the client wrote it (lone surrogates too). */
function encodeURIComponentLoose(value: string): string {
  return Array.from(value, (char) => (/^[\w.~-]$/.test(char) ? char : [...Buffer.from(char)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join(''))).join('');
}

/** Who sends a request: mostly tokens that reach the store, sometimes none, a made-up one or a revoked one. */
type Credential = 'admin' | 'publish' | 'read' | 'none' | 'garbage' | 'revoked';
const credentialArb = fc.oneof(
  { arbitrary: fc.constant<Credential>('admin'), weight: 4 },
  { arbitrary: fc.constant<Credential>('publish'), weight: 3 },
  { arbitrary: fc.constantFrom<Credential>('read', 'none', 'garbage', 'revoked'), weight: 3 },
);

function send(url: string, r: { method: string; path: string; contentType: string | undefined; body: string }, token: string | undefined) {
  const headers: Record<string, string> = r.contentType === undefined ? {} : { 'content-type': r.contentType };
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  return rawRequest(url, r.method, r.path, r.method === 'GET' || r.method === 'DELETE' ? undefined : r.body, headers);
}

const BACKENDS: Backend[] = ['sqlite', 'postgres'];
for (const backend of BACKENDS) {
  describe.skipIf(backend === 'postgres' && !pgAvailable)(`a hostile-input campaign against the ${backend} store${backend === 'postgres' ? pgSkipReason : ''}`, () => {
    it(`answers ${REQUESTS} generated requests below 500, refusals as problem+json, and a refused request changes nothing (seed ${SEED})`, async () => {
      console.log(`hostile campaign (${backend}): seed ${SEED}, ${REQUESTS} requests (ONCEBOX_SEED=${SEED} to replay)`);
      const { url, server } = await startServer({ backend, rateLimit: false });
      const { tokens } = server.store;
      const revoked = await tokens.create({ scope: 'admin' });
      await tokens.revoke(revoked.info.id);
      const tokenOf: Record<Credential, string | undefined> = {
        admin: (await tokens.create({ scope: 'admin' })).token,
        publish: (await tokens.create({ scope: 'publish', producers: 'p', assets: ['batch_ready'] })).token,
        read: (await tokens.create({ scope: 'read' })).token,
        none: undefined,
        garbage: `obx_0123456789abcdef_${'x'.repeat(43)}`,
        revoked: revoked.token,
      };
      // What a request changed: the events stored since the last look (and by which producers), and the assets.
      let cursor = 0;
      let assets = (await server.store.listAssets()).join(',');
      const changes = async () => {
        const page = await server.store.listEvents({ after: cursor, limit: 1000 });
        cursor = page.next;
        const now = (await server.store.listAssets()).join(',');
        const changed = { newEvents: page.events.length, assetsChanged: now !== assets };
        assets = now;
        return { ...changed, producers: new Set(page.events.map((event) => event.producer)) };
      };
      await fc.assert(
        fc.asyncProperty(requestArb, credentialArb, async (r, who) => {
          const answer = await send(url, r, tokenOf[who]);
          const what = `${who}: ${JSON.stringify(r).slice(0, 300)}`;
          expect(answer.status, what).toBeLessThan(500);
          const { producers, ...changed } = await changes();
          if (answer.status >= 400) {
            expect(answer.type, what).toBe('application/problem+json; charset=utf-8');
            expect(PROBLEM_CODES.has(answer.json?.code), answer.json?.code).toBe(true);
            expect(changed, 'a refused request changed the store').toEqual({ newEvents: 0, assetsChanged: false });
          }
          const healthCheck = answer.status === 200 && answer.json?.ok === true;
          // Without a live token only the router's own refusals (a bad target: 400, 414; a method the route
          // does not have: 405) come before the 401.
          if (['none', 'garbage', 'revoked'].includes(who) && !healthCheck) expect([400, 401, 405, 414], what).toContain(answer.status);
          if (who === 'read') expect(changed, 'a read token changed the store').toEqual({ newEvents: 0, assetsChanged: false });
          if (who === 'publish') {
            expect([...producers].filter((producer) => producer !== 'p'), 'a publish token wrote as another producer').toEqual([]);
            expect(changed.assetsChanged, 'a publish token registered an asset').toBe(false);
          }
          for (const result of answer.json?.results ?? []) {
            if (result.status === 'rejected') expect(REJECTION_CODES.has(result.code), result.code).toBe(true);
          }
        }),
        { numRuns: REQUESTS, seed: SEED, endOnFailure: true },
      );
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
    }, Math.max(120_000, REQUESTS * 100));
  });
}
