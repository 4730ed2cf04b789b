import type { FastifyInstance } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { TokenRequest } from '../../src/dedupe/tokens.js';
import { item, newKey, rawRequest } from '../support/http.js';
import { pgAvailable, pgSkipReason } from '../support/postgres.js';
import { startServer, type Backend, type RunningServer } from '../support/server.js';

/**
 * Every authenticated route of the server, taken from fastify's own route table, against every kind of
 * caller that must not reach the victim's data: a route added without a row here fails the first test,
 * so no route can skip the matrix. Each refused call must be 401 or 403 problem+json and leave everything
 * the victim has (stream state, events, assets, tokens) as it was; each route's rightful caller is let in,
 * so that a row never passes by aiming at nothing.
 */

const PROBLEM = 'application/problem+json; charset=utf-8';
const VICTIM = { producer: 'victim', workflow: 'w', runId: 'r1', task: null, attempt: 1 };
/** Routes anyone may call, with the path probed and what it answers without a token: the console's pages hold no data. */
const PUBLIC: Record<string, { path: string; status: number }> = {
  'GET /healthz': { path: '/healthz', status: 200 },
  'GET /openapi.json': { path: '/openapi.json', status: 200 },
  'GET /': { path: '/', status: 302 },
  'GET /console': { path: '/console', status: 302 },
  'GET /console/*': { path: '/console/', status: 200 },
};
const PUBLIC_ROUTES = Object.keys(PUBLIC);

const CALLERS = {
  admin: { scope: 'admin' },
  /** The victim's own job. */
  victim: { scope: 'publish', producers: 'victim' },
  /** Another tenant's job. */
  mallory: { scope: 'publish', producers: 'mallory' },
  /** A reader of everything: events, every producer's streams, metrics. */
  reader: { scope: 'read', reads: ['events', 'streams', 'metrics'] },
  /** A reader of another asset's events only (the default for a read token limited to assets). */
  otherReader: { scope: 'read', assets: ['other_asset'] },
  /** A consumer of the victim's asset: it publishes as itself, and reads the events it consumes. */
  consumer: { scope: 'publish', producers: 'summariser', consumes: ['victim_asset'] },
  /** A consumer of another asset. */
  otherConsumer: { scope: 'publish', producers: 'other-summariser', consumes: ['other_asset'] },
} satisfies Record<string, TokenRequest>;
type Caller = keyof typeof CALLERS | 'none';

interface RouteRow {
  /** The call, aimed at the victim's data. */
  target: (ctx: { victimTokenId: string }) => { method: string; path: string; body?: unknown };
  /** Who gets in, with the status they get; everyone else must be refused. */
  allowed: Partial<Record<Caller, number>>;
}

let seq = 100;
const ROUTES: Record<string, RouteRow> = {
  'POST /v1/emissions': {
    target: () => ({ method: 'POST', path: '/v1/emissions', body: { stream: VICTIM, items: [item(++seq, newKey(), { asset: 'victim_asset' })] } }),
    allowed: { admin: 200, victim: 200 },
  },
  'POST /v1/streams/:producer/:runId/attempts': {
    target: () => ({ method: 'POST', path: '/v1/streams/victim/r1/attempts', body: {} }),
    allowed: { admin: 201, victim: 201 },
  },
  'GET /v1/streams/:producer/:runId': { target: () => ({ method: 'GET', path: '/v1/streams/victim/r1' }), allowed: { admin: 200, victim: 200, reader: 200 } },
  'GET /v1/events': { target: () => ({ method: 'GET', path: '/v1/events?asset=victim_asset' }), allowed: { admin: 200, reader: 200, consumer: 200 } },
  // A reader (or consumer) of other assets is shown those only: checked on its own below.
  // Every token may ask what it may do itself, and is told only that.
  'GET /v1/token': {
    target: () => ({ method: 'GET', path: '/v1/token' }),
    allowed: { admin: 200, victim: 200, mallory: 200, reader: 200, otherReader: 200, consumer: 200, otherConsumer: 200 },
  },
  'GET /v1/assets': { target: () => ({ method: 'GET', path: '/v1/assets' }), allowed: { admin: 200, reader: 200, otherReader: 200, consumer: 200, otherConsumer: 200 } },
  'PUT /v1/assets/:name': { target: () => ({ method: 'PUT', path: `/v1/assets/squat_${++seq}` }), allowed: { admin: 201 } },
  'GET /v1/tokens': { target: () => ({ method: 'GET', path: '/v1/tokens' }), allowed: { admin: 200 } },
  'POST /v1/tokens': { target: () => ({ method: 'POST', path: '/v1/tokens', body: { scope: 'publish', producers: 'victim' } }), allowed: { admin: 201 } },
  // The admin's own call revokes the victim's token: it runs last (see below).
  'DELETE /v1/tokens/:id': { target: ({ victimTokenId }) => ({ method: 'DELETE', path: `/v1/tokens/${victimTokenId}` }), allowed: { admin: 200 } },
  'GET /metrics': { target: () => ({ method: 'GET', path: '/metrics' }), allowed: { admin: 200, reader: 200 } },
  // The catalog's lists are scoped rather than refused for the tokens that read events or streams at all
  // (test/store/catalog.test.ts checks what each sees); one stream and one asset's partitions are refused.
  'GET /v1/catalog': { target: () => ({ method: 'GET', path: '/v1/catalog' }), allowed: { admin: 200, reader: 200, consumer: 200, otherConsumer: 200 } },
  'GET /v1/catalog/assets': {
    target: () => ({ method: 'GET', path: '/v1/catalog/assets' }),
    allowed: { admin: 200, reader: 200, otherReader: 200, consumer: 200, otherConsumer: 200 },
  },
  'GET /v1/catalog/assets/:asset/partitions': {
    target: () => ({ method: 'GET', path: '/v1/catalog/assets/victim_asset/partitions' }),
    allowed: { admin: 200, reader: 200, consumer: 200 },
  },
  'GET /v1/catalog/streams': {
    target: () => ({ method: 'GET', path: '/v1/catalog/streams' }),
    allowed: { admin: 200, reader: 200, victim: 200, mallory: 200, consumer: 200, otherConsumer: 200 },
  },
  'GET /v1/catalog/streams/:producer/:runId': { target: () => ({ method: 'GET', path: '/v1/catalog/streams/victim/r1' }), allowed: { admin: 200, reader: 200, victim: 200 } },
  'GET /v1/catalog/consumers': {
    target: () => ({ method: 'GET', path: '/v1/catalog/consumers' }),
    allowed: { admin: 200, reader: 200, victim: 200, mallory: 200, consumer: 200, otherConsumer: 200 },
  },
  'GET /v1/catalog/rejections': {
    target: () => ({ method: 'GET', path: '/v1/catalog/rejections' }),
    allowed: { admin: 200, reader: 200, victim: 200, mallory: 200, consumer: 200, otherConsumer: 200 },
  },
};

/** The routes fastify serves, as "METHOD /path", HEAD left out (it follows GET), from its route table. */
function routesOf(app: FastifyInstance): string[] {
  const routes: string[] = [];
  const prefixes: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const at = line.indexOf('── ');
    if (at < 0) continue;
    const depth = Math.round(at / 4);
    const match = /^(\S+) \(([^)]+)\)$/.exec(line.slice(at + 3).trim());
    if (!match) throw new Error(`cannot read fastify's route table line: ${line}`);
    // The table prints a wildcard under its parent without the slash between them (`console` then `*`).
    const parent = depth === 0 ? '' : prefixes[depth - 1]!;
    prefixes[depth] = `${parent}${match[1] === '*' && !parent.endsWith('/') ? '/' : ''}${match[1]}`;
    for (const method of match[2]!.split(', ')) if (method !== 'HEAD') routes.push(`${method} ${prefixes[depth]}`);
  }
  return routes.sort();
}

async function everythingOfTheVictim(running: RunningServer) {
  const { store } = running.server;
  return {
    state: await store.streamState('victim', 'r1', null),
    events: (await store.listEvents({ after: 0, limit: 1000 })).events.filter((event) => event.producer === 'victim'),
    assets: await store.listAssets(),
    tokens: (await store.tokens.list()).map((token) => `${token.id} ${token.scope} ${token.producers} ${token.revokedAt ?? 'live'}`),
  };
}

const BACKENDS: Backend[] = ['sqlite', 'postgres'];

describe('the route scope matrix', () => {
  it("holds a row for every authenticated route in fastify's route table, and only those", async () => {
    const running = await startServer();
    await running.server.app.ready();
    const served = routesOf(running.server.app);
    expect(served.filter((route) => !PUBLIC_ROUTES.includes(route))).toEqual(Object.keys(ROUTES).sort());
    // The public ones answer without a token even once tokens exist; every other one asks for one.
    await running.server.store.tokens.create({ scope: 'admin' });
    for (const [route, probe] of Object.entries(PUBLIC)) {
      expect({ route, status: (await rawRequest(running.url, route.split(' ')[0]!, probe.path)).status }).toEqual({ route, status: probe.status });
    }
  });

  it("lets no caller but the group's own (and admin) note another group's fetch by naming it in a read of events", async () => {
    const running = await startServer({ assets: ['victim_asset', 'other_asset'] });
    const tokens: Record<string, string> = {};
    for (const [name, request] of Object.entries(CALLERS)) tokens[name] = (await running.server.store.tokens.create(request)).token;
    const group = { producer: 'victim', workflow: 'oncebox.consumer', runId: 'victim-group', task: null, attempt: 1 };
    const seeded = await rawRequest(running.url, 'POST', '/v1/emissions', JSON.stringify({ stream: group, items: [{ seq: 1, key: newKey(), kind: 'checkpoint', name: 'oncebox.cursor', value: 0 }] }), {
      authorization: `Bearer ${tokens.victim}`,
      'content-type': 'application/json',
    });
    expect(seeded.status).toBe(200);
    const lastFetch = async () => (await rawRequest(running.url, 'GET', '/v1/catalog/consumers', undefined, { authorization: `Bearer ${tokens.admin}` })).json.items[0].lastFetchAt;
    for (const caller of ['reader', 'consumer', 'otherConsumer', 'mallory'] as const) {
      await rawRequest(running.url, 'GET', '/v1/events?after=0&group=victim-group&groupProducer=victim', undefined, { authorization: `Bearer ${tokens[caller]}` });
      expect({ caller, lastFetch: await lastFetch() }).toEqual({ caller, lastFetch: null });
    }
    await rawRequest(running.url, 'GET', '/v1/events?after=0&asset=victim_asset&group=victim-group&groupProducer=victim', undefined, { authorization: `Bearer ${tokens.admin}` });
    expect(await lastFetch()).toEqual(expect.any(String));
  });

  for (const backend of BACKENDS) {
    it.skipIf(backend === 'postgres' && !pgAvailable)(
      `refuses every caller outside a route's scope on every route, and leaves the victim as it was: ${backend}${backend === 'postgres' ? pgSkipReason : ''}`,
      async () => {
        const running = await startServer({ backend, assets: ['victim_asset', 'other_asset'] });
        const tokens: Record<string, string> = {};
        let victimTokenId = '';
        for (const [name, request] of Object.entries(CALLERS)) {
          const created = await running.server.store.tokens.create(request);
          tokens[name] = created.token;
          if (name === 'victim') victimTokenId = created.info.id;
        }
        const call = (caller: Caller, target: { method: string; path: string; body?: unknown }) =>
          rawRequest(
            running.url,
            target.method,
            target.path,
            target.body === undefined ? undefined : JSON.stringify(target.body),
            {
              ...(caller === 'none' ? {} : { authorization: `Bearer ${tokens[caller]}` }),
              ...(target.body === undefined ? {} : { 'content-type': 'application/json' }),
            },
          );
        // The victim has a stream, a checkpoint and an event to lose.
        const seeded = await call('victim', {
          method: 'POST',
          path: '/v1/emissions',
          body: { stream: VICTIM, items: [item(1, newKey(), { asset: 'victim_asset' }), { seq: 2, key: newKey(), kind: 'checkpoint', name: 'progress', value: 1 }] },
        });
        expect(seeded.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'checkpointed']);

        const refusals: { call: string; status: number; type: string; code: unknown }[] = [];
        const expected: typeof refusals = [];
        for (const [route, row] of Object.entries(ROUTES)) {
          for (const caller of ['none', ...Object.keys(CALLERS)] as Caller[]) {
            if (row.allowed[caller] !== undefined) continue;
            const before = await everythingOfTheVictim(running);
            const answer = await call(caller, row.target({ victimTokenId }));
            refusals.push({ call: `${route} by ${caller}`, status: answer.status, type: answer.type, code: answer.json?.code });
            const status = caller === 'none' ? 401 : 403;
            expected.push({ call: `${route} by ${caller}`, status, type: PROBLEM, code: status === 401 ? 'unauthorized' : 'forbidden' });
            expect({ call: `${route} by ${caller}`, victim: await everythingOfTheVictim(running) }).toEqual({ call: `${route} by ${caller}`, victim: before });
          }
        }
        // Every refusal first, then one comparison: a failure shows the whole matrix.
        expect(refusals).toEqual(expected);

        // Each rightful caller gets in: no row aims at nothing. The admin's revocation of the victim's token goes last.
        const allowedCalls = Object.entries(ROUTES).flatMap(([route, row]) => Object.entries(row.allowed).map(([caller, status]) => ({ route, row, caller: caller as Caller, status })));
        allowedCalls.sort((a, b) => Number(a.route.startsWith('DELETE')) - Number(b.route.startsWith('DELETE')));
        for (const { route, row, caller, status } of allowedCalls) {
          const answer = await call(caller, row.target({ victimTokenId }));
          expect({ call: `${route} by ${caller}`, status: answer.status }).toEqual({ call: `${route} by ${caller}`, status });
          if (route === 'GET /v1/assets' && (caller === 'otherReader' || caller === 'otherConsumer')) expect(answer.json.assets).toEqual(['other_asset']);
          if (route === 'GET /v1/assets' && caller === 'consumer') expect(answer.json.assets).toEqual(['victim_asset']);
          if (route === 'GET /v1/token' && caller === 'otherReader') expect(answer.json).toEqual({ scope: 'read', producers: '*', assets: ['other_asset'], consumes: [], reads: ['events'] });
          if (route === 'GET /v1/token' && caller === 'victim') expect(answer.json).toMatchObject({ scope: 'publish', producers: 'victim', assets: null });
        }
        // A token limited to some assets that names none reads those, and only those.
        for (const [caller, asset] of [['otherReader', 'other_asset'], ['otherConsumer', 'other_asset'], ['consumer', 'victim_asset']] as const) {
          const page = await call(caller, { method: 'GET', path: '/v1/events?after=0' });
          expect({ caller, status: page.status }).toEqual({ caller, status: 200 });
          expect(page.json.events.every((event: { asset: string }) => event.asset === asset)).toBe(true);
        }
        const victimEvents = await call('consumer', { method: 'GET', path: '/v1/events?after=0' });
        expect(victimEvents.json.events.length).toBeGreaterThan(0);
      },
    );
  }
});
