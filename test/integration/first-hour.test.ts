import Database from 'better-sqlite3';
import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openConsumer } from '../../src/consumer/index.js';
import { openOutbox, OptionsError } from '../../src/outbox/index.js';
import { REPO, runScript, startScript } from '../support/child.js';
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

  it('a store command pointed at the wrong file refuses it, saying what it is, and writes nothing to it', async () => {
    const dir = tempDir();
    const app = join(dir, 'app.db');
    const other = new Database(app);
    other.exec('CREATE TABLE customers (id INTEGER)');
    other.close();
    const outbox = join(dir, 'job.db');
    const box = await openOutbox({ path: outbox, server: 'http://127.0.0.1:9', relay: 'manual', resume: 'never', producer: 'p', run: RUN });
    await box.close({ timeoutMs: 0 });
    const tables = (path: string) => new Database(path, { readonly: true }).prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all();
    const before = { app: tables(app), outbox: tables(outbox) };
    for (const [args, what] of [
      [['token', 'list', '--db', app], 'a SQLite database, but not an oncebox server store'],
      [['token', 'create', '--db', outbox, '--scope', 'admin'], "a producer's outbox file (a job's), not a server store"],
      [['server', '--db', outbox, '--port', '0'], "a producer's outbox file (a job's), not a server store"],
    ] as const) {
      const refused = await runScript(CLI, [...args]);
      expect({ args, code: refused.code }).toEqual({ args, code: 2 });
      expect(refused.stderr).toContain(`it is ${what}`);
    }
    expect({ app: tables(app), outbox: tables(outbox) }).toEqual(before);
    // A misspelt store for list or revoke is refused; create may make a new one, and says so.
    const missing = await runScript(CLI, ['token', 'list', '--db', join(dir, 'sever.db')]);
    expect({ code: missing.code, stderr: missing.stderr }).toEqual({ code: 2, stderr: expect.stringContaining('no such file') });
    expect(existsSync(join(dir, 'sever.db'))).toBe(false);
    const created = await runScript(CLI, ['token', 'create', '--db', join(dir, 'new.db'), '--scope', 'admin', '--json']);
    expect(created.code).toBe(0);
    expect(created.stderr).toContain('it is a new, empty server store now; start the server with --db');
  });

  it('a token file others can read is taken, with a warning to chmod it', async () => {
    const dir = tempDir();
    const file = join(dir, 'admin.token');
    writeFileSync(file, 'an-admin-token-in-a-file\n');
    chmodSync(file, 0o644);
    const server = startScript(CLI, ['server', '--db', join(dir, 'server.db'), '--port', '0', '--token-file', file]);
    expect(await server.waitFor((line) => line.event === 'listening')).toMatchObject({ auth: 'on' });
    server.signal('SIGTERM');
    expect((await server.done).stderr).toContain(`warning: --token-file ${file} can be read by other users of this machine; chmod 600 ${file}`);
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
