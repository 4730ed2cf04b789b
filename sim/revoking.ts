import { expect } from './violation.js';
import type { Tenant, World } from './world.js';

const TOKEN_ID = /^obx_([0-9a-f]{16})_/;

/**
 * An operator revokes a tenant's read token (it leaked) and gives the tenant a new one, through the
 * admin API of the instance that serves (G17): the old token is refused there at once, though that
 * instance had its grant cached; a second revocation keeps the first one's time; the new token reads.
 */
export async function revokeAndReplace(world: World, tenant: Tenant): Promise<void> {
  const old = tenant.tokens.reader;
  const id = TOKEN_ID.exec(old)![1]!;
  const read = (token: string) => world.fetch('/v1/catalog/streams?limit=1', { headers: { authorization: `Bearer ${token}` } });
  expect('G17', (await read(old)).status === 200, () => `${tenant.name}'s read token was refused before its revocation`);
  const revoke = async () => {
    const response = await world.fetch(`/v1/tokens/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${world.admin}` } });
    const body = (await response.json()) as { revokedAt?: string | null };
    expect('no 5xx', response.status === 200, () => `revoking a token answered ${response.status}: ${JSON.stringify(body)}`);
    return body.revokedAt;
  };
  const first = await revoke();
  const after = await read(old);
  expect('G17', after.status === 401 || after.status === 403, () => `${tenant.name}'s revoked read token still read the catalog on the instance that revoked it (${after.status})`);
  world.clock += 1000;
  const second = await revoke();
  expect('G17', second === first, () => `a second revocation of ${tenant.name}'s read token changed its time from ${first} to ${second}`);
  const created = await world.fetch('/v1/tokens', {
    method: 'POST',
    headers: { authorization: `Bearer ${world.admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ scope: 'read', reads: ['events', 'streams'], producers: `${tenant.name}-*`, assets: Object.values(tenant.assets).filter((asset) => asset !== tenant.assets.typo) }),
  });
  const { token } = (await created.json()) as { token: string };
  expect('no 5xx', created.status === 201 || created.status === 200, () => `creating a token answered ${created.status}`);
  tenant.tokens.reader = token;
  expect('G17', (await read(token)).status === 200, () => `${tenant.name}'s new read token was refused`);
  world.happened('a read token revoked and replaced');
}

/**
 * Last of all, an operator revokes every token (they all leaked), the admin's own last, and restarts each
 * instance: a server whose tokens are all revoked stays shut, to a request without a token as to each
 * revoked one; it never takes itself for a new server that has no tokens yet (G17).
 */
export async function revokeEveryToken(world: World): Promise<void> {
  const asAdmin = { authorization: `Bearer ${world.admin}` };
  const listed = await world.fetch('/v1/tokens', { headers: asAdmin });
  expect('no 5xx', listed.status === 200, () => `listing the tokens answered ${listed.status}`);
  const ids = ((await listed.json()) as { tokens: { id: string }[] }).tokens.map((token) => token.id);
  const adminId = TOKEN_ID.exec(world.admin)![1]!;
  for (const id of [...ids.filter((other) => other !== adminId), adminId]) {
    const response = await world.fetch(`/v1/tokens/${id}`, { method: 'DELETE', headers: asAdmin });
    expect('no 5xx', response.status === 200, () => `revoking token ${id} answered ${response.status}`);
  }
  for (let i = 0; i < world.serverUrls.length; i++) await world.restartServer();
  const tokens = [undefined, world.admin, ...world.tenants.flatMap((tenant) => Object.values(tenant.tokens))];
  for (const url of world.serverUrls) {
    for (const token of tokens) {
      const response = await world.fetchFrom(url, '/v1/events?after=0&limit=1', { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
      await response.body?.cancel();
      expect('G17', response.status === 401, () => `with every token revoked and the server restarted, ${url} answered ${response.status} to ${token === undefined ? 'a request without a token' : 'a revoked token'}`);
    }
  }
  world.happened('every token revoked, the server restarted');
}
