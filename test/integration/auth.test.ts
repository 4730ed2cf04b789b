import { describe, expect, it } from 'vitest';
import { item, newKey, rawRequest, STREAM } from '../support/http.js';
import { startServer } from '../support/server.js';

/**
 * Request targets exactly as a hostile client writes them, sent byte for byte (fetch would normalise
 * them first): percent-encoded letters and digits, encoded slashes, double slashes, dot segments, case,
 * absolute-form targets, and trailing `?` or `;`. Without a token, every one must be refused.
 */
function raw(url: string, method: string, target: string, body?: string, headers: Record<string, string> = {}) {
  return rawRequest(url, method, target, body, { ...(body ? { 'content-type': 'application/json' } : {}), ...headers });
}

const TOKEN = 'a-long-enough-secret';
const emission = () => JSON.stringify({ stream: STREAM, items: [item(1, newKey())] });

const corpus: [string, string, (() => string) | undefined][] = [
  ['GET', '/v1/assets', undefined],
  ['GET', '/%761/assets', undefined],
  ['GET', '/v%31/assets', undefined],
  ['GET', '/%76%31/events', undefined],
  ['GET', '/v1/%65vents', undefined],
  ['GET', '/v1%2fassets', undefined],
  ['GET', '/v1%2Fassets', undefined],
  ['GET', '//v1/assets', undefined],
  ['GET', '/v1//assets', undefined],
  ['GET', '/./v1/assets', undefined],
  ['GET', '/v1/./assets', undefined],
  ['GET', '/x/../v1/assets', undefined],
  ['GET', '/healthz/../v1/assets', undefined],
  ['GET', '/V1/assets', undefined],
  ['GET', '/v1/ASSETS', undefined],
  ['GET', '/v1/assets/', undefined],
  ['GET', '/v1/assets?', undefined],
  ['GET', '/v1/assets;', undefined],
  ['GET', '/v1/assets;x=1', undefined],
  ['GET', 'http://x/v1/assets', undefined],
  ['GET', 'http://x/%761/events', undefined],
  ['GET', '/v1/events?after=0', undefined],
  ['GET', '/v1/streams/p/r1', undefined],
  ['GET', '/v1/streams/p/r1?', undefined],
  ['POST', '/v1/emissions', emission],
  ['POST', '/%761/emissions', emission],
  ['POST', '/v%31/emissions', emission],
  ['POST', '/v1/emissions?', emission],
  ['POST', '/v1/emissions;', emission],
  ['POST', 'http://x/v1/emissions', emission],
  ['PUT', '/v1/assets/stolen', undefined],
  ['PUT', '/%761/assets/stolen', undefined],
  ['PUT', '/v1/assets/stolen;', undefined],
  ['PUT', 'http://x/v1/assets/stolen', undefined],
];

describe('authentication, decided after routing and denying by default', () => {
  it.each(corpus)('refuses %s %s without the token, as problem+json', async (method, target, body) => {
    const { url, server } = await startServer({ token: TOKEN });
    const answer = await raw(url, method, target, body?.());
    expect({ status: answer.status, type: answer.type, code: answer.json?.code }).toEqual({
      status: 401,
      type: 'application/problem+json; charset=utf-8',
      code: 'unauthorized',
    });
    expect((await server.store.listEvents({ after: 0, limit: 1000 })).events).toEqual([]);
    expect(await server.store.listAssets()).toEqual(['batch_ready', 'run_done']);
  });

  it.each(corpus)('refuses %s %s with a token of the wrong scope, as 403 problem+json', async (method, target, body) => {
    const { url, server } = await startServer({ token: TOKEN });
    // A reader may not write, and a publisher of another producer may neither read nor write p's streams.
    const wrong = await server.store.tokens.create(method === 'GET' ? { scope: 'publish', producers: 'q' } : { scope: 'read' });
    const answer = await raw(url, method, target, body?.(), { authorization: `Bearer ${wrong.token}` });
    // Where the target reaches no route at all, the answer is the 404 an admin gets (asked on a server of
    // its own, which it may change); everywhere else, 403.
    const probe = await startServer({ token: TOKEN });
    const asAdmin = await raw(probe.url, method, target, body?.(), { authorization: `Bearer ${TOKEN}` });
    const reachesRoute = !(asAdmin.status === 404 && /^no route/.test(asAdmin.json?.detail));
    expect({ status: answer.status, type: answer.type, code: answer.json?.code }).toEqual(
      reachesRoute
        ? { status: 403, type: 'application/problem+json; charset=utf-8', code: 'forbidden' }
        : { status: 404, type: 'application/problem+json; charset=utf-8', code: 'not_found' },
    );
    expect((await server.store.listEvents({ after: 0, limit: 1000 })).events).toEqual([]);
    expect(await server.store.listAssets()).toEqual(['batch_ready', 'run_done']);
  });

  it('serves the same targets with the token, and answers health checks without one', async () => {
    const { url } = await startServer({ token: TOKEN });
    const auth = { authorization: `Bearer ${TOKEN}` };
    expect((await raw(url, 'GET', '/%761/assets', undefined, auth)).json).toEqual({ assets: ['batch_ready', 'run_done'] });
    expect((await raw(url, 'POST', '/v1/emissions', emission(), auth)).json.results[0].status).toBe('accepted');
    expect((await raw(url, 'GET', '/healthz')).status).toBe(200);
  });
});

describe('requests without a live token', () => {
  it('count against their source address: past the allowance, 429 with Retry-After, before any lookup', async () => {
    const running = await startServer({ rateLimit: { max: 5, windowMs: 3000 } });
    const { token } = await running.server.store.tokens.create({ scope: 'read' });
    let lookups = 0;
    const grantFor = running.server.store.tokens.grantFor.bind(running.server.store.tokens);
    running.server.store.tokens.grantFor = (presented) => {
      lookups++;
      return grantFor(presented);
    };
    const guess = (i: number) =>
      fetch(`${running.url}/v1/events`, { headers: { authorization: `Bearer obx_${i.toString(16).padStart(16, '0')}_${'A'.repeat(43)}` } });
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await guess(i)).status);
    expect(statuses.slice(0, 5)).toEqual([401, 401, 401, 401, 401]);
    expect(statuses.slice(6)).toEqual([429, 429, 429, 429, 429, 429]);
    const barred = await guess(99);
    expect(barred.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    expect(await barred.json()).toMatchObject({ code: 'rate_limited' });
    // Barred, the address costs no lookup; and once the window is over, a live token is served again.
    expect(lookups).toBeLessThanOrEqual(7);
    await new Promise((resolve) => setTimeout(resolve, 3500));
    expect((await fetch(`${running.url}/v1/events`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
  });

  it('count per client behind a trusted proxy (X-Forwarded-For), and per peer when the proxy is not trusted', async () => {
    const from = (url: string, client: string) => fetch(`${url}/v1/events`, { headers: { authorization: `Bearer obx_${'0'.repeat(16)}_${'A'.repeat(43)}`, 'x-forwarded-for': client } });
    for (const [trustProxy, otherClient] of [[['127.0.0.1'], 401], [undefined, 429]] as const) {
      const running = await startServer({ rateLimit: { max: 3, windowMs: 60_000 }, ...(trustProxy ? { trustProxy: [...trustProxy] } : {}) });
      await running.server.store.tokens.create({ scope: 'read' });
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) statuses.push((await from(running.url, '203.0.113.7')).status);
      expect(statuses.slice(4)).toEqual([429, 429]);
      // Another client behind the same proxy: its own allowance only when the proxy is trusted.
      expect({ trustProxy, status: (await from(running.url, '198.51.100.9')).status }).toEqual({ trustProxy, status: otherClient });
    }
  });
});
