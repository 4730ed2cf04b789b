import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openConsumer } from '../../src/consumer/index.js';
import { openOutbox, OptionsError } from '../../src/outbox/index.js';
import { REPO, startScript } from '../support/child.js';
import { startServer } from '../support/server.js';
import { quiet } from '../support/task-runs.js';
import { tempDir } from '../support/temp.js';

/** What a new user met in the first hour, each now telling them what to do. */
const CLI = join(REPO, 'src/cli/main.ts');
const RUN = { workflow: 'orders', runId: '2026-11-30', task: 'ingest', attempt: 1 };

describe('the first hour', () => {
  it('a stream asked for without its task names the tasks the run has', async () => {
    const server = await startServer();
    const box = await openOutbox({ path: join(tempDir(), 'job.db'), server: server.url, producer: 'orders-ingest', run: RUN, logger: quiet });
    await box.asset('batch_ready').emit({ partitionKey: 'batch-1' });
    await box.close();
    const without = await fetch(`${server.url}/v1/streams/orders-ingest/2026-11-30`);
    expect(without.status).toBe(404);
    expect(((await without.json()) as { detail: string }).detail).toBe('no stream orders-ingest/2026-11-30 has delivered to this server; this run has delivered as ?task=ingest');
    const other = await fetch(`${server.url}/v1/streams/orders-ingest/2026-11-30?task=load`);
    expect(((await other.json()) as { detail: string }).detail).toBe('no stream orders-ingest/2026-11-30 task load has delivered to this server; this run has delivered as ?task=ingest');
    expect((await fetch(`${server.url}/v1/streams/orders-ingest/2026-11-30?task=ingest`)).status).toBe(200);
    const unknown = await fetch(`${server.url}/v1/streams/orders-ingest/never`);
    expect(((await unknown.json()) as { detail: string }).detail).toBe('no stream orders-ingest/never has delivered to this server');
  });

  it('a checkpoint without a schema (plain JavaScript) is refused with the fix, not a TypeError later', async () => {
    const box = await openOutbox({ path: join(tempDir(), 'job.db'), server: 'http://127.0.0.1:9', relay: 'manual', resume: 'never', producer: 'p', run: RUN });
    const missing = () => (box.checkpoint as (name: string) => unknown)('progress');
    expect(missing).toThrow(OptionsError);
    expect(missing).toThrow("box.checkpoint('progress', schema): the second argument must be a zod schema of the checkpoint's value");
    await box.close({ timeoutMs: 0 });
  });

  it('a consumer says where it resumed from: the first event, its own file, or the server’s copy', async () => {
    const server = await startServer({ assets: ['batch_ready', 'summary'] });
    const box = await openOutbox({ path: join(tempDir(), 'job.db'), server: server.url, producer: 'p', run: RUN, logger: quiet });
    await box.asset('batch_ready').emit({ partitionKey: 'batch-1' });
    await box.close();
    const dir = tempDir();
    const open = (file: string) => openConsumer({ path: join(dir, file), server: server.url, group: 'g', assets: ['batch_ready'], logger: quiet, waitSeconds: 0.2 });
    const first = await open('a.db');
    expect(first.resumedFrom).toEqual({ source: 'start', cursor: 0 });
    const stop = new AbortController();
    const running = first.run((_event, ctx) => ctx.commit(() => undefined), { signal: stop.signal });
    while (first.cursor < 1) await new Promise((resolve) => setTimeout(resolve, 10));
    stop.abort();
    await running;
    await first.close();
    const again = await open('a.db');
    expect(again.resumedFrom).toEqual({ source: 'file', cursor: 1 });
    await again.close();
    const fresh = await open('b.db');
    expect(fresh.resumedFrom).toEqual({ source: 'server', cursor: 1 });
    await fresh.close();
  });

  it('the server says whether auth is on, warns when it is off beyond loopback, and takes its admin token from ONCEBOX_ADMIN_TOKEN, never ONCEBOX_TOKEN', async () => {
    const dir = tempDir();
    const open = startScript(CLI, ['server', '--db', join(dir, 'open.db'), '--port', '0', '--host', '0.0.0.0']);
    expect(await open.waitFor((line) => line.event === 'listening')).toMatchObject({ auth: 'off' });
    open.signal('SIGTERM');
    expect((await open.done).stderr).toContain('oncebox server: warning: listening on 0.0.0.0 with no token: anyone who can reach it may publish and read');

    const admin = startScript(CLI, ['server', '--db', join(dir, 'admin.db'), '--port', '0'], { ONCEBOX_ADMIN_TOKEN: 'an-admin-token-from-the-environment', ONCEBOX_TOKEN: 'a-jobs-token' });
    const url = (await admin.waitFor((line) => line.event === 'listening' && line.auth === 'on')).url as string;
    expect((await fetch(`${url}/v1/assets`, { headers: { authorization: 'Bearer an-admin-token-from-the-environment' } })).status).toBe(200);
    expect((await fetch(`${url}/v1/assets`, { headers: { authorization: 'Bearer a-jobs-token' } })).status).toBe(401);
    admin.signal('SIGTERM');
    expect((await admin.done).stderr).not.toContain('ONCEBOX_TOKEN is set');

    // A job's variable in the server's environment is left alone, and the server says so.
    const jobs = startScript(CLI, ['server', '--db', join(dir, 'jobs.db'), '--port', '0'], { ONCEBOX_TOKEN: 'a-jobs-token' });
    expect(await jobs.waitFor((line) => line.event === 'listening')).toMatchObject({ auth: 'off' });
    jobs.signal('SIGTERM');
    expect((await jobs.done).stderr).toContain("oncebox server: note: ONCEBOX_TOKEN is set, but it is the jobs' token; the server's admin token comes from --token-file or ONCEBOX_ADMIN_TOKEN");

    // Tokens in the store turn auth on too.
    const assets = join(dir, 'assets.txt');
    writeFileSync(assets, 'batch_ready\n');
    const stored = await startServer({ db: join(dir, 'stored.db') });
    await stored.server.store.tokens.create({ scope: 'admin' });
    await stored.close();
    const withTokens = startScript(CLI, ['server', '--db', join(dir, 'stored.db'), '--port', '0', '--assets', assets]);
    expect(await withTokens.waitFor((line) => line.event === 'listening')).toMatchObject({ auth: 'on', assets: ['batch_ready', 'run_done'] });
    withTokens.signal('SIGTERM');
    await withTokens.done;
  });
});
