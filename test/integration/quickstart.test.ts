import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO, runScript } from '../support/child.js';
import { startServer } from '../support/server.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { tempDir } from '../support/temp.js';

describe('the README quickstart', () => {
  it('is the code of examples/quickstart.ts', () => {
    const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
    const block = /## Quickstart[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const example = readFileSync(join(REPO, 'examples/quickstart.ts'), 'utf8')
      .replace(/^\/\/ The README's quickstart.*\n/, '')
      .replace("from '../src/outbox/index.js'", "from 'oncebox'");
    expect(block).toBe(example);
  });

  it('shows, under "Retries and zombies", lines of examples/batch-ingest.ts', () => {
    const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
    const block = /## Retries and zombies[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
    const job = readFileSync(join(REPO, 'examples/batch-ingest.ts'), 'utf8').split('\n').map((line) => line.trim());
    const lines = block.split('\n').map((line) => line.trim()).filter(Boolean);
    expect(lines.length).toBeGreaterThan(5);
    for (const line of lines) expect(job).toContain(line);
  });

  it('runs against a real server and publishes each batch once, also when run twice, saying what it did', async () => {
    // As in the README: the server holds an admin token, and the job a publish token of its own producer.
    const { url, server } = await startServer({ token: 'quickstart-admin-token' });
    const { token } = await server.store.tokens.create({ scope: 'publish', producers: 'orders-ingest', assets: ['batch_ready'] });
    const env = { ONCEBOX_SERVER: url, ONCEBOX_TOKEN: token, ONCEBOX_OUTBOX: join(tempDir(), 'quickstart.db') };
    const first = await runScript('examples/quickstart.ts', [], { env });
    expect(first.code, first.stderr).toBe(0);
    const firstLines = first.lines.map((line) => line.text);
    // Today's run, its attempt claimed from the server.
    const today = new Date().toISOString().slice(0, 10);
    expect(firstLines[0]).toBe(`run ${today}, attempt 1: starting at batch 1`);
    expect(firstLines.slice(1)).toEqual(['batch-1', 'batch-2', 'batch-3', 'done'].map((partition) => expect.stringMatching(new RegExp(`^${partition}: published as event [0-9a-f-]{36}$`))));
    const again = await runScript('examples/quickstart.ts', [], { env });
    expect(again.code, again.stderr).toBe(0);
    expect(again.lines.map((line) => line.text)).toEqual([
      `run ${today}, attempt 2: resuming at batch 4; its checkpoint says 3 are done`,
      expect.stringMatching(/^done: published before, as event [0-9a-f-]{36}; this retry added nothing$/),
    ]);
    const stored = (await server.store.listEvents({ after: 0, limit: 100 })).events;
    expect(stored.map((event) => event.partitionKey)).toEqual(['batch-1', 'batch-2', 'batch-3', 'done']);
    expect(new Set(stored.map((event) => event.runId))).toEqual(new Set([today]));
  });

  it('says what is left and exits 1 when the server goes down after the start, instead of hanging', async () => {
    const { url } = await startServer();
    // The server answers the claim of the attempt, then no delivery reaches it.
    const proxy = await startFaultProxy(url, { choose: ({ url: path }) => (path.startsWith('/v1/emissions') ? 'drop-request' : 'forward') });
    const path = join(tempDir(), 'quickstart.db');
    const env = { ONCEBOX_SERVER: proxy.url, ONCEBOX_OUTBOX: path, ONCEBOX_LOG_LEVEL: 'warn' };
    const run = await runScript('examples/quickstart.ts', [], { env, timeoutMs: 40_000 });
    expect(run.code).toBe(1);
    expect(run.lines.map((line) => line.text)).toContain('batch-1: not published yet (network)');
    expect(run.stderr).toContain(
      `not done: ${path}: 4 events and 3 checkpoint updates not delivered yet (they stay in the file; the next run delivers them, or \`oncebox relay ${path} --server ${proxy.url} --drain\` now, with the job's token in ONCEBOX_TOKEN); last delivery error: could not reach ${proxy.url}/v1/emissions`,
    );
    // The default logger said it too, as JSON on stderr (not a terminal), once per cause.
    expect(run.stderr.match(/"code":"closed_with_work_left"/g)).toHaveLength(1);
  });

  it('stops at the start, committing nothing, when no server answers its claim of an attempt', async () => {
    const path = join(tempDir(), 'quickstart.db');
    const run = await runScript('examples/quickstart.ts', [], { env: { ONCEBOX_SERVER: 'http://127.0.0.1:9', ONCEBOX_OUTBOX: path }, timeoutMs: 60_000 });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^cannot start: run \d{4}-\d\d-\d\d could not claim its attempt from the server: no server answered within 30000 ms .*Make the server reachable/m);
    const status = await runScript('src/cli/main.ts', ['status', path, '--json']);
    expect(status.lines).toEqual([expect.objectContaining({ pending: 0, dead: 0 })]);
  });

  it('names the refusal when the server refuses an event for good, instead of "last error: none"', async () => {
    const { url } = await startServer({ assets: [] });
    const path = join(tempDir(), 'quickstart.db');
    const run = await runScript('examples/quickstart.ts', [], { env: { ONCEBOX_SERVER: url, ONCEBOX_OUTBOX: path }, timeoutMs: 40_000 });
    expect(run.code).toBe(1);
    expect(run.lines.map((line) => line.text)).toContain('batch-1: not published yet (unknown_asset)');
    expect(run.stderr).toContain(`not done: ${path}: 4 events refused for good, the first refused with unknown_asset: asset: "batch_ready" is not registered on this server`);
    expect(run.stderr).toContain(`unknown_asset: Register the asset (oncebox server --assets FILE, or PUT /v1/assets/batch_ready with an admin token), then send the dead rows again: oncebox dead retry ${path} --all. If the name is misspelt, correct it in the job and publish those partitions again instead (docs/runbook.md).`);
  });

  it('logs one readable line per cause on a terminal (or with ONCEBOX_LOG_FORMAT=pretty), not JSON', async () => {
    const { url } = await startServer();
    const proxy = await startFaultProxy(url, { choose: ({ url: path }) => (path.startsWith('/v1/emissions') ? 'drop-request' : 'forward') });
    const env = { ONCEBOX_SERVER: proxy.url, ONCEBOX_OUTBOX: join(tempDir(), 'quickstart.db'), ONCEBOX_LOG_LEVEL: 'warn', ONCEBOX_LOG_FORMAT: 'pretty' };
    const run = await runScript('examples/quickstart.ts', [], { env, timeoutMs: 40_000 });
    const logLines = run.stderr.split('\n').filter((line) => / (WARN|ERROR): /.test(line));
    expect(logLines.length).toBeGreaterThan(0);
    for (const line of logLines) {
      expect(line).toMatch(/^\[\d\d:\d\d:\d\d\] (WARN|ERROR): oncebox.* \[[a-z_]+\]$/);
      expect(line).not.toContain('{"');
    }
  });
});
