import { describe, expect, it } from 'vitest';
import { item, newKey, rawRequest } from '../support/http.js';
import { startServer } from '../support/server.js';

/**
 * Found by a hostile review of issue 22: a taken position resent with another payload (G5), a token
 * revoked on this instance (G17), and a stream reader limited to one producer (G17).
 */
const call = (url: string, method: string, path: string, token: string | undefined, body?: unknown) =>
  rawRequest(url, method, path, body === undefined ? undefined : JSON.stringify(body), {
    ...(token ? { authorization: `Bearer ${token}` } : {}),
    ...(body === undefined ? {} : { 'content-type': 'application/json' }),
  });

describe('the server against a resent position and a revoked or narrow token', () => {
  it('refuses, not answers as a duplicate, a taken position resent with its key and another payload', async () => {
    const { url } = await startServer();
    const stream = { producer: 'p', workflow: 'w', runId: 'r1', task: null, attempt: 1 };
    const key = newKey();
    await call(url, 'POST', '/v1/emissions', undefined, { stream, items: [item(1, key)] });
    const other = await call(url, 'POST', '/v1/emissions', undefined, { stream, items: [item(1, key, { extra: { other: true } })] });
    expect(other.json.results[0].status).not.toBe('duplicate');
  });

  it('refuses a token revoked through this instance at once, whatever the grant cache’s time', async () => {
    const running = await startServer({ tokenCacheMs: 60_000 });
    const admin = (await running.server.store.tokens.create({ scope: 'admin' })).token;
    const { token, info } = await running.server.store.tokens.create({ scope: 'read' });
    expect((await call(running.url, 'GET', '/v1/events', token)).status).toBe(200);
    expect((await call(running.url, 'DELETE', `/v1/tokens/${info.id}`, admin)).status).toBe(200);
    expect((await call(running.url, 'GET', '/v1/events', token)).status).toBe(401);
  });

  it('keeps the first revocation time when a token is revoked twice', async () => {
    const running = await startServer();
    const { info } = await running.server.store.tokens.create({ scope: 'read' });
    const first = await running.server.store.tokens.revoke(info.id);
    await new Promise((r) => setTimeout(r, 20));
    const second = await running.server.store.tokens.revoke(info.id);
    expect(second?.revokedAt).toBe(first?.revokedAt);
  });

  it('refuses a stream reader of one producer another producer’s stream state', async () => {
    const running = await startServer();
    const admin = (await running.server.store.tokens.create({ scope: 'admin' })).token;
    const reader = (await running.server.store.tokens.create({ scope: 'read', reads: ['streams'], producers: 'victim' })).token;
    const stream = { producer: 'mallory', workflow: 'w', runId: 'r1', task: null, attempt: 1 };
    await call(running.url, 'POST', '/v1/emissions', admin, { stream, items: [item(1, newKey()), { seq: 2, key: newKey(), kind: 'checkpoint', name: 'secret', value: 1 }] });
    expect((await call(running.url, 'GET', '/v1/streams/mallory/r1', reader)).status).toBe(403);
  });
});
