import { describe, expect, it } from 'vitest';
import { Authenticator } from '../../src/dedupe/auth.js';
import { SqliteDedupeStore } from '../../src/dedupe/sqlite/store.js';
import { ADMIN_GRANT, assetAllowed, describeGrant, grantOf, hashToken, producerAllowed, tokenId, tokenRequestSchema } from '../../src/dedupe/tokens.js';
import { join } from 'node:path';
import { tempDir } from '../support/temp.js';

const grant = (request: unknown) => grantOf(tokenRequestSchema.parse(request));

describe('token grants', () => {
  it('match a producer by name, by prefix, or all', () => {
    const exact = grant({ scope: 'publish', producers: 'ingest' });
    expect([producerAllowed(exact, 'ingest'), producerAllowed(exact, 'ingest-2'), producerAllowed(exact, 'ingesT')]).toEqual([true, false, false]);
    const prefix = grant({ scope: 'publish', producers: 'ingest-*' });
    expect([producerAllowed(prefix, 'ingest-'), producerAllowed(prefix, 'ingest-eu'), producerAllowed(prefix, 'ingest'), producerAllowed(prefix, 'x-ingest-eu')]).toEqual([
      true,
      true,
      false,
      false,
    ]);
    expect(producerAllowed(grant({ scope: 'read' }), 'anyone')).toBe(true);
    expect(producerAllowed(ADMIN_GRANT, 'anyone')).toBe(true);
  });

  it('match assets from the list, or every asset when there is none', () => {
    const listed = grant({ scope: 'publish', producers: 'p', assets: ['b', 'a', 'b'] });
    expect(listed.assets).toEqual(['a', 'b']);
    expect([assetAllowed(listed, 'a'), assetAllowed(listed, 'c')]).toEqual([true, false]);
    expect(assetAllowed(grant({ scope: 'publish', producers: 'p' }), 'c')).toBe(true);
  });

  it('give a read token both reads unless told, and other scopes none', () => {
    expect(grant({ scope: 'read' })).toEqual({ scope: 'read', producers: '*', assets: null, reads: ['events', 'streams'], consumes: [] });
    // Limited to assets and naming no producers: no stream state, unless asked for.
    expect(grant({ scope: 'read', assets: ['x'] }).reads).toEqual(['events']);
    expect(grant({ scope: 'read', assets: ['x'], producers: 'p' }).reads).toEqual(['events', 'streams']);
    expect(grant({ scope: 'read', assets: ['x'], reads: ['streams'] })).toMatchObject({ producers: '*', reads: ['streams'] });
    expect(grant({ scope: 'publish', producers: 'p' }).consumes).toEqual([]);
    expect(grant({ scope: 'publish', producers: 'p', consumes: ['b', 'a', 'b'] }).consumes).toEqual(['a', 'b']);
    expect(grant({ scope: 'read', reads: ['streams', 'streams'] }).reads).toEqual(['streams']);
    expect(grant({ scope: 'publish', producers: 'p' }).reads).toEqual([]);
    expect(grant({ scope: 'admin' })).toEqual(ADMIN_GRANT);
  });

  it.each([
    [{ scope: 'publish' }, 'producers', 'a publish token needs the producer it publishes as'],
    [{ scope: 'publish', producers: 'a*b' }, 'producers', 'a prefix ending in *'],
    [{ scope: 'publish', producers: '' }, 'producers', 'must not be empty'],
    [{ scope: 'publish', producers: 'p', reads: ['events'] }, 'reads', 'only a read token has reads'],
    [{ scope: 'admin', assets: ['a'] }, 'assets', 'takes no producers or assets'],
    [{ scope: 'read', assets: [] }, 'assets', 'at least one asset'],
    [{ scope: 'read', reads: ['everything'] }, 'reads.0', 'must be "events", "streams" or "metrics"'],
    [{ scope: 'root' }, 'scope', 'must be "publish", "read" or "admin"'],
    [{ scope: 'read', note: 'a\u0000b' }, 'note', 'NUL'],
    [{ scope: 'read', extra: 1 }, '', 'Unrecognized key: "extra"'],
    [{ scope: 'read', consumes: ['a'] }, 'consumes', 'only a publish token consumes'],
    [{ scope: 'publish', producers: 'p', consumes: [] }, 'consumes', 'at least one asset'],
  ])('refuse %j, naming %s', (request, field, message) => {
    const parsed = tokenRequestSchema.safeParse(request);
    expect(parsed.success).toBe(false);
    const issue = parsed.error!.issues[0]!;
    expect(issue.path.join('.')).toBe(field);
    expect(parsed.error!.issues.map((i) => i.message).join('\n')).toContain(message);
  });

  it('describe themselves in one line', () => {
    expect(describeGrant(grant({ scope: 'publish', producers: 'p*', assets: ['a'] }))).toBe('publish as producers matching "p*", to assets a');
    expect(describeGrant(grant({ scope: 'read', reads: ['events'] }))).toBe('read events (events of every asset)');
    expect(describeGrant(grant({ scope: 'read', assets: ['x'], reads: ['events', 'streams'] }))).toBe('read events and streams (events of assets x; streams of producers matching "*")');
    expect(describeGrant(grant({ scope: 'publish', producers: 'c', consumes: ['x'] }))).toBe('publish as producers matching "c", to every asset, naming events of x as causes');
    expect(describeGrant(ADMIN_GRANT)).toBe('admin: everything');
  });

  it('tell a token of ours by its shape', () => {
    const token = `obx_0123456789abcdef_${'A'.repeat(43)}`;
    expect(tokenId(token)).toBe('0123456789abcdef');
    expect(tokenId(`${token}x`)).toBeUndefined();
    expect(tokenId('a-shared-secret')).toBeUndefined();
    expect(hashToken(token)).toMatch(/^[0-9a-f]{64}$/);
    expect(hashToken(token)).not.toBe(hashToken(`${token.slice(0, -1)}B`));
  });
});

describe('the authenticator', () => {
  it('answers from its cache until told to forget, and never caches the shared token', async () => {
    const store = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    const auth = new Authenticator({ legacyToken: 'shared-secret', tokens: store.tokens, cacheMs: 60_000 });
    const { token, info } = await store.tokens.create({ scope: 'read' });
    expect(await auth.grantFor(token)).toMatchObject({ scope: 'read' });
    await store.tokens.revoke(info.id);
    expect(await auth.grantFor(token)).toMatchObject({ scope: 'read' });
    auth.forget();
    expect(await auth.grantFor(token)).toBeUndefined();
    expect(await auth.grantFor('shared-secret')).toBe(ADMIN_GRANT);
    expect(await auth.grantFor('shared-secreT')).toBeUndefined();
    expect(await auth.grantFor('shared-secret-longer')).toBeUndefined();
    await store.close();
  });

  it('refuses a token of no known shape on a server with only scoped tokens', async () => {
    const store = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    const auth = new Authenticator({ tokens: store.tokens, cacheMs: 60_000 });
    await store.tokens.create({ scope: 'admin' });
    expect(await auth.grantFor('not-a-token-of-ours')).toBeUndefined();
    await store.close();
  });

  it('keeps at most 10,000 grants cached, so made-up tokens cannot grow it without bound', async () => {
    const store = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    const auth = new Authenticator({ tokens: store.tokens, cacheMs: 60_000 });
    const { token, info } = await store.tokens.create({ scope: 'read' });
    expect(await auth.grantFor(token)).toMatchObject({ scope: 'read' });
    await store.tokens.revoke(info.id);
    const madeUp = (i: number) => `obx_${i.toString(16).padStart(16, '0')}_${'x'.repeat(43)}`;
    // A few made-up tokens leave the cache as it was: the revoked token is still trusted for cacheMs.
    expect(await auth.grantFor(madeUp(1))).toBeUndefined();
    expect(await auth.grantFor(token)).toMatchObject({ scope: 'read' });
    // At the bound the cache starts again, and the revocation is seen.
    for (let i = 2; i <= 10_000; i++) await auth.grantFor(madeUp(i));
    expect(await auth.grantFor(token)).toBeUndefined();
    await store.close();
  });

  it('asks for tokens once one exists, and keeps asking', async () => {
    const store = new SqliteDedupeStore({ path: join(tempDir(), 'server.db') });
    const auth = new Authenticator({ tokens: store.tokens, cacheMs: 0 });
    expect(await auth.isRequired()).toBe(false);
    const { info } = await store.tokens.create({ scope: 'read' });
    expect(await auth.isRequired()).toBe(true);
    await store.tokens.revoke(info.id);
    expect(await auth.isRequired()).toBe(true);
    expect(await new Authenticator({ tokens: store.tokens, cacheMs: 0 }).isRequired()).toBe(true);
    await store.close();
  });
});
