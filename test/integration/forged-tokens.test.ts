import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { rawRequest } from '../support/http.js';
import { PG_URL, pgAvailable, pgSkipReason, testSchema } from '../support/postgres.js';
import { startServer, type Backend, type RunningServer } from '../support/server.js';

/**
 * Forged tokens at every point of the grant cache's life: a real id with a wrong secret, one token's
 * secret under another's id, a revoked token. Each is refused cold, while the real token's grant is
 * cached, after the cache time, and after the real token was revoked on another instance; the real
 * token is let in exactly while it is live.
 */

const CACHE_MS = 300;
const PROBLEM = 'application/problem+json; charset=utf-8';

const parts = (token: string) => {
  const match = /^obx_([0-9a-f]{16})_(.{43})$/.exec(token);
  if (!match) throw new Error(`not a token of ours: ${token}`);
  return { id: match[1]!, secret: match[2]! };
};
const secret = () => randomBytes(32).toString('base64url');
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function statusOf(running: RunningServer, token: string): Promise<string> {
  const answer = await rawRequest(running.url, 'GET', '/v1/events', undefined, { authorization: `Bearer ${token}` });
  return answer.status === 200 ? '200' : `${answer.status} ${answer.type === PROBLEM ? answer.json?.code : answer.type}`;
}

const BACKENDS: Backend[] = ['sqlite', 'postgres'];

for (const backend of BACKENDS) {
  describe.skipIf(backend === 'postgres' && !pgAvailable)(`forged tokens: ${backend}${backend === 'postgres' ? pgSkipReason : ''}`, () => {
    it('refuses a wrong secret for a real id, a secret under another id and a revoked token, cold, warm, expired and revoked elsewhere', async () => {
      const schema = testSchema();
      const here = await startServer({ backend, tokenCacheMs: CACHE_MS, ...(backend === 'postgres' ? { db: PG_URL, schema } : {}) });
      // Another instance over the same store: on PostgreSQL a second server; on SQLite the store itself,
      // as `oncebox token revoke` does from another process.
      const elsewhere = backend === 'postgres' ? await startServer({ backend, tokenCacheMs: CACHE_MS, db: PG_URL, schema }) : undefined;
      const { store } = here.server;
      const real = await store.tokens.create({ scope: 'read' });
      const other = await store.tokens.create({ scope: 'read' });
      const revoked = await store.tokens.create({ scope: 'read' });
      await store.tokens.revoke(revoked.info.id);
      const forged = {
        'wrong secret for the real id': `obx_${real.info.id}_${secret()}`,
        "real secret under another token's id": `obx_${other.info.id}_${parts(real.token).secret}`,
        "another token's secret under the real id": `obx_${real.info.id}_${parts(other.token).secret}`,
        'a revoked token': revoked.token,
      };
      const refusedAll = async (stage: string) => {
        const answers: Record<string, string> = {};
        for (const [what, token] of Object.entries(forged)) answers[`${stage}: ${what}`] = await statusOf(here, token);
        expect(answers).toEqual(Object.fromEntries(Object.keys(forged).map((what) => [`${stage}: ${what}`, '401 unauthorized'])));
      };

      await refusedAll('cold');
      expect(await statusOf(here, real.token)).toBe('200');
      await refusedAll("while the real token's grant is cached");
      await pause(CACHE_MS + 100);
      await refusedAll('after the cache time');
      expect(await statusOf(here, real.token)).toBe('200');
      expect(await statusOf(here, other.token)).toBe('200');

      // Revoked on the other instance: this one refuses it once its cache time has passed, and still
      // every forgery.
      if (elsewhere) {
        const admin = await elsewhere.server.store.tokens.create({ scope: 'admin' });
        const revoking = await rawRequest(elsewhere.url, 'DELETE', `/v1/tokens/${real.info.id}`, undefined, { authorization: `Bearer ${admin.token}` });
        expect(revoking.status).toBe(200);
      } else {
        await store.tokens.revoke(real.info.id);
      }
      await pause(CACHE_MS + 100);
      expect(await statusOf(here, real.token)).toBe('401 unauthorized');
      await refusedAll('after the real token was revoked elsewhere');
      expect(await statusOf(here, other.token)).toBe('200');
    });
  });
}
