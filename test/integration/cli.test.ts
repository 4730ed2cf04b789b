import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, expect, it, vi } from 'vitest';
import { openOutbox } from '../../src/outbox/index.js';
import { allEvents, startServer } from '../support/server.js';
import { REPO, runScript, startScript } from '../support/child.js';
import { startFaultProxy, type Fault } from '../support/fault-proxy.js';
import { startNetFront } from '../support/net-front.js';
import { RUN } from '../support/outbox.js';
import { tempDir } from '../support/temp.js';

const CLI = 'src/cli/main.ts';

describe('the oncebox command', () => {
  it('runs a server, a separate relay process and status, end to end', async () => {
    const dir = tempDir();
    const assets = join(dir, 'assets.txt');
    writeFileSync(assets, '# registered assets\nbatch_ready\n\nrun_done\n');
    const server = startScript(CLI, ['server', '--db', join(dir, 'server.db'), '--port', '0', '--assets', assets]);
    const listening = await server.waitFor((line) => line.event === 'listening');
    expect(listening.assets).toEqual(['batch_ready', 'run_done']);
    const url = listening.url as string;

    const path = join(dir, 'outbox.db');
    const box = await openOutbox({ path, producer: 'orders-ingest', run: RUN, relay: 'external' });
    const receipts = [1, 2, 3].map((i) => box.asset('batch_ready').emit({ partitionKey: `batch-${i}` }));
    box.commit((tx) => tx.emit(box.asset('nope'), { partitionKey: 'x' }));

    const pending = await runScript(CLI, ['status', path, '--json']);
    expect(JSON.parse(pending.lines.map((l) => JSON.stringify(l)).join(''))).toMatchObject({ pending: 4, delivered: 0, dead: 0 });

    // The server from ONCEBOX_SERVER, as the job beside it reads it.
    const relay = await runScript(CLI, ['relay', path, '--drain'], { env: { ONCEBOX_LOG_LEVEL: 'warn', ONCEBOX_SERVER: url } });
    // Drained, but a row is dead: that needs someone to act, so the exit code is not 0.
    expect(relay.code).toBe(3);
    expect(relay.lines.at(-1)).toEqual({ text: 'oncebox relay: drained: 3 events delivered, 0 pending, 1 dead' });
    expect(relay.stderr).toContain(`oncebox relay: 1 event is dead (refused for good): see \`oncebox dead list ${path}\``);
    expect(relay.stderr).toContain('"code":"unknown_asset"');
    // The job process learns its receipts from the file, written by the relay process.
    const stored = await allEvents(url);
    expect((await Promise.all(receipts)).map((r) => r.eventId)).toEqual(stored.map((e) => e.eventId));

    // Status exits 3 while an event is dead: a script checking the file learns it needs a person.
    const status = await runScript(CLI, ['status', path, '--json']);
    expect(status.code).toBe(3);
    expect(status.lines[0]).toMatchObject({ pending: 0, delivered: 3, dead: 1, producer: 'orders-ingest' });
    const human = await runScript(CLI, ['status', path]);
    expect(human.code).toBe(3);
    expect(human.lines.map((l) => l.text)).toEqual(
      expect.arrayContaining([
        `outbox     ${path} (producer orders-ingest)`,
        'run        orders/2026-11-30/ingest attempt 1',
        'events     0 pending, 3 delivered, 1 dead',
        'checkpoint 0 updates not yet mirrored to the server',
        `next       unknown_asset: Register the asset (oncebox server --assets FILE, or PUT /v1/assets/nope with an admin token), then send the dead rows again: oncebox dead retry ${path} --all. If the name is misspelt, correct it in the job and publish those partitions again instead (docs/runbook.md).`,
        'held       0 until the run succeeds, 0 discarded by a failure',
        'fenced     no',
        'lease      free',
      ]),
    );
    await box.close();

    server.signal('SIGTERM');
    const stopped = await server.done;
    expect(stopped.code).toBe(0);
    // Its log says that it was told to stop, and that it did.
    expect(stopped.lines.slice(-2)).toEqual([{ event: 'stopping', signal: 'SIGTERM' }, { event: 'stopped' }]);
  });

  it('runs as a relay until stopped, idle or not: commits made after a quiet spell are delivered, and SIGTERM ends it with 0', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'orders-ingest', run: RUN, relay: 'external' });
    const relay = startScript(CLI, ['relay', '--db', path, '--server', server.url], { ONCEBOX_LOG_LEVEL: 'warn' });
    // Idle for longer than any of the relay's timers tick: a relay whose timers are all unref'd would exit here.
    const idle = await Promise.race([relay.done, new Promise((resolve) => setTimeout(resolve, 1500))]);
    expect(idle, 'the relay exited while idle').toBeUndefined();
    const receipt = box.asset('batch_ready').emit({ partitionKey: 'after-a-quiet-spell' });
    expect((await receipt).duplicate).toBe(false);
    expect((await server.events()).map((event) => event.partitionKey)).toEqual(['after-a-quiet-spell']);
    relay.signal('SIGTERM');
    expect((await relay.done).code).toBe(0);
    await box.close();
  });

  it('keeps running as a relay when the server closes its first connection unanswered, and delivers once it answers', async () => {
    const server = await startServer();
    // The token check at start meets a connection closed before a byte is read (a server restarting).
    const front = await startNetFront(server.url, 1);
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'orders-ingest', run: RUN, relay: 'external' });
    const relay = startScript(CLI, ['relay', '--db', path, '--server', front.url], { ONCEBOX_LOG_LEVEL: 'warn' });
    const receipt = box.asset('batch_ready').emit({ partitionKey: 'after-a-cut-connection' });
    const outcome = await Promise.race([receipt.then(() => 'delivered'), relay.done.then((done) => `the relay exited (${done.code}): ${done.stderr}`)]);
    expect(outcome).toBe('delivered');
    expect(front.accepted).toBeGreaterThan(1);
    expect((await server.events()).map((event) => event.partitionKey)).toEqual(['after-a-cut-connection']);
    relay.signal('SIGTERM');
    expect((await relay.done).code).toBe(0);
    await box.close();
  });

  it('stops cleanly on a Ctrl-C that reaches it twice at once (npm passing on the one the terminal sent it too)', async () => {
    const server = startScript(CLI, ['server', '--db', join(tempDir(), 'server.db'), '--port', '0']);
    await server.waitFor((line) => line.event === 'listening');
    server.signal('SIGINT');
    // The second once the first is taken: two sent at once would reach it as one.
    await server.waitFor((line) => line.event === 'stopping');
    server.signal('SIGINT');
    const ended = await server.done;
    expect({ code: ended.code, signal: ended.signal }).toEqual({ code: 0, signal: null });
    expect(ended.lines.map((line) => line.event)).toEqual(['listening', 'stopping', 'stopped']);
  });

  it('stops on a SIGTERM that comes while it still asks the server about its token', async () => {
    // A server that takes the connection and never answers: the relay's start waits on it.
    const held: Socket[] = [];
    const silent = createServer((socket) => void held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const path = join(tempDir(), 'outbox.db');
      await (await openOutbox({ path, producer: 'orders-ingest', run: RUN, relay: 'external' })).close();
      const relay = startScript(CLI, ['relay', '--db', path, '--server', `http://127.0.0.1:${(silent.address() as AddressInfo).port}`], { ONCEBOX_LOG_LEVEL: 'warn' });
      await vi.waitFor(() => expect(held.length).toBeGreaterThan(0), { timeout: 60_000 });
      relay.signal('SIGTERM');
      expect((await relay.done).code).toBe(0);
    } finally {
      for (const socket of held) socket.destroy();
      silent.close();
    }
  });

  it('refuses unknown flags and commands in one line that points to the command’s --help, with status 2', async () => {
    const cases: [string[], RegExp, Record<string, string>?][] = [
      [['server', '--db', 'x.db', '--dbb', 'x'], /^oncebox: unknown option '--dbb' \(Did you mean --db\?\) \(see 'oncebox server --help'\)\n$/],
      [['relay', 'x.db'], /^oncebox: required option '--server <url>' not specified \(see 'oncebox relay --help'\)\n$/],
      [['relay', '--server', 'http://127.0.0.1:9'], /^oncebox relay: give the outbox FILE to deliver \(see 'oncebox relay --help'\)\n$/],
      [['frobnicate'], /^oncebox: unknown command 'frobnicate' \(see 'oncebox --help'\)\n$/],
      [['server', '--db', 'x.db', '--stale-run-hours', '0.001'], /^oncebox: option '--stale-run-hours <hours>' argument '0\.001' is invalid\. must be from 0\.017 \(one minute\) to 87600 \(ten years\) hours \(got 0\.001\) \(see 'oncebox server --help'\)\n$/],
      [['server', '--db', 'x.db', '--stale-run-hours', '2500000001'], /argument '2500000001' is invalid\. must be from 0\.017 \(one minute\) to 87600 \(ten years\) hours/],
      [['dead', 'retry'], /^oncebox: missing required argument 'file' \(see 'oncebox dead retry --help'\)\n$/],
      [['status', 'a.db', '--port', '1'], /^oncebox: unknown option '--port' \(see 'oncebox status --help'\)\n$/],
      [['server', '--db', 'x.db', '--port', 'high'], /^oncebox: option '--port <n>' argument 'high' is invalid\. must be 0-65535 \(got high\) \(see 'oncebox server --help'\)\n$/],
      [['relay', 'x.db', '--server', 'notaurl', '--drain'], /^oncebox: option '--server <url>' argument 'notaurl' is invalid\. must be the server's http:\/\/ or https:\/\/ URL, such as http:\/\/127\.0\.0\.1:8787 \(got notaurl\) \(see 'oncebox relay --help'\)\n$/],
      [['events', '--server', 'ftp://127.0.0.1:8787'], /^oncebox: option '--server <url>' argument 'ftp:\/\/127\.0\.0\.1:8787' is invalid\. must be the server's http:\/\/ or https:\/\/ URL/],
      [['events'], /^oncebox: option '--server <url>' value 'http:\/\/127\.0\.0\.1:8787,notaurl' from env 'ONCEBOX_SERVER' is invalid\. must be the server's http:\/\/ or https:\/\/ URL, such as http:\/\/127\.0\.0\.1:8787 \(got notaurl\) \(see 'oncebox events --help'\)\n$/, { ONCEBOX_SERVER: 'http://127.0.0.1:8787,notaurl' }],
    ];
    for (const [args, message, env] of cases) {
      const run = await runScript(CLI, args, { env: env ?? {} });
      expect({ args, code: run.code, stderr: run.stderr }).toEqual({ args, code: 2, stderr: expect.stringMatching(message) });
    }
  });

  it('shows the help of a command given without its subcommand, instead of an error', async () => {
    for (const command of ['token', 'dead', 'forward']) {
      const run = await runScript(CLI, [command]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`Usage: oncebox ${command} [options] [command]`);
      expect(run.stderr).toContain('Commands:');
    }
  });

  it('takes the token from a file, warns when it is given on the command line, and never prints it', async () => {
    const dir = tempDir();
    const token = 'a-secret-that-stays-secret';
    writeFileSync(join(dir, 'token.txt'), `${token}\n`);
    const server = startScript(CLI, ['server', '--db', join(dir, 'server.db'), '--port', '0', '--token-file', join(dir, 'token.txt')]);
    const url = (await server.waitFor((line) => line.event === 'listening')).url as string;
    expect((await fetch(`${url}/v1/assets`)).status).toBe(401);
    expect((await fetch(`${url}/v1/assets`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    server.signal('SIGTERM');
    const done = await server.done;
    expect(JSON.stringify(done.lines) + done.stderr).not.toContain(token);

    const visible = startScript(CLI, ['server', '--db', join(dir, 'server2.db'), '--port', '0', '--token', token]);
    await visible.waitFor((line) => line.event === 'listening');
    visible.signal('SIGTERM');
    const warned = await visible.done;
    expect(warned.stderr).toContain('oncebox server: warning: --token is visible to every user of this machine (ps); use --token-file or ONCEBOX_ADMIN_TOKEN');
    expect(warned.stderr).not.toContain(token);

    const empty = join(dir, 'empty.txt');
    writeFileSync(empty, '\n');
    expect((await runScript(CLI, ['server', '--db', join(dir, 's3.db'), '--token-file', empty])).stderr).toContain(`--token-file ${empty} is empty`);
  });

  it('warns of limits that work against each other, and starts anyway', async () => {
    const dir = tempDir();
    const server = startScript(CLI, ['server', '--db', join(dir, 'server.db'), '--port', '0', '--max-connections', '16', '--max-waiters', '16', '--stream-retention-days', '1']);
    await server.waitFor((line) => line.event === 'listening');
    server.signal('SIGTERM');
    const { stderr } = await server.done;
    expect(stderr).toContain('oncebox server: warning: --max-waiters 16 is not below --max-connections 16: waiting reads could hold every connection and leave none for jobs publishing');
    expect(stderr).toContain("oncebox server: warning: --stream-retention-days is shorter than --dedupe-retention-days; keep a run's stream state at least as long as its keys");
    const fine = startScript(CLI, ['server', '--db', join(dir, 'fine.db'), '--port', '0', '--max-waiters', '100']);
    await fine.waitFor((line) => line.event === 'listening');
    fine.signal('SIGTERM');
    expect((await fine.done).stderr).not.toContain('warning');
  });

  it('creates, lists and revokes scoped tokens; the secret is shown once, and a relay publishes with one', async () => {
    const dir = tempDir();
    const db = join(dir, 'server.db');
    const tokenFile = join(dir, 'relay.token');
    const created = await runScript(CLI, ['token', 'create', '--db', db, '--scope', 'publish', '--producers', 'orders-*', '--assets', 'batch_ready', '--out', tokenFile, '--note', 'nightly']);
    expect(created.code).toBe(0);
    const secret = readFileSync(tokenFile, 'utf8').trim();
    expect(secret).toMatch(/^obx_[0-9a-f]{16}_/);
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    expect(created.lines.map((l) => l.text).join('\n')).not.toContain(secret);
    const id = secret.split('_')[1]!;
    expect(created.lines[0]!.text).toBe(`created token ${id}: publish as producers matching "orders-*", to assets batch_ready`);
    // The file is never overwritten: it may hold another token.
    const again = await runScript(CLI, ['token', 'create', '--db', db, '--scope', 'read', '--out', tokenFile]);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain(`token create: --out ${tokenFile} exists (it may hold another token); name a new file`);
    expect(readFileSync(tokenFile, 'utf8').trim()).toBe(secret);

    const printed = await runScript(CLI, ['token', 'create', '--db', db, '--scope', 'read', '--reads', 'events', '--json']);
    const reader = printed.lines[0] as { id: string; token: string; scope: string; reads: string[] };
    expect(reader).toMatchObject({ scope: 'read', reads: ['events'], assets: null });

    const listed = await runScript(CLI, ['token', 'list', '--db', db]);
    const text = listed.lines.map((l) => l.text).join('\n');
    expect(text).toContain(`${id}  live`);
    expect(text).toContain('(nightly)');
    expect(text).not.toContain(secret);
    expect(text).not.toContain(reader.token);

    const server = startScript(CLI, ['server', '--db', db, '--port', '0', '--assets', writeAssets(dir)]);
    const url = (await server.waitFor((line) => line.event === 'listening')).url as string;
    const path = join(dir, 'outbox.db');
    const box = await openOutbox({ path, producer: 'orders-ingest', run: RUN, relay: 'external' });
    box.asset('batch_ready').emit({ partitionKey: 'batch-1' });
    const relay = await runScript(CLI, ['relay', path, '--server', url, '--token-file', tokenFile, '--drain']);
    expect(relay.code).toBe(0);
    expect((await fetch(`${url}/v1/events`, { headers: { authorization: `Bearer ${reader.token}` } })).status).toBe(200);
    expect((await fetch(`${url}/v1/events`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(403);
    await box.close();

    const revoked = await runScript(CLI, ['token', 'revoke', reader.id, '--db', db]);
    expect(revoked.lines[0]!.text).toMatch(new RegExp(`^revoked ${reader.id}  revoked `));
    await new Promise((resolve) => setTimeout(resolve, 2100)); // the server trusts a grant for 2 s
    expect((await fetch(`${url}/v1/events`, { headers: { authorization: `Bearer ${reader.token}` } })).status).toBe(401);
    server.signal('SIGTERM');
    expect((await server.done).code).toBe(0);

    const missing = await runScript(CLI, ['token', 'revoke', 'nope', '--db', db]);
    expect({ code: missing.code, stderr: missing.stderr.trim() }).toEqual({ code: 1, stderr: 'oncebox token revoke: no token nope; oncebox token list shows the ids' });
    const bad = await runScript(CLI, ['token', 'create', '--db', db, '--scope', 'publish']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('token create: --producers: a publish token needs the producer it publishes as (or a prefix ending in *)');
    expect((await runScript(CLI, ['token', 'list', '--db', db, '--scope', 'read'])).stderr).toContain("unknown option '--scope'");
  }, 360_000);
});

describe('the oncebox command, polished', () => {
  it('refuses a forward with no target, no map or no Airflow credentials, naming what is missing', async () => {
    const noTarget = await runScript(CLI, ['forward', 'kafka']);
    expect(noTarget.code).toBe(2);
    expect(noTarget.stderr).toMatch(/^oncebox: unknown command 'kafka' \(see 'oncebox forward --help'\)/);
    const noMap = await runScript(CLI, ['forward', 'airflow', '--server', 'http://127.0.0.1:1', '--airflow', 'http://127.0.0.1:1']);
    expect(noMap.code).toBe(2);
    expect(noMap.stderr).toMatch(/^oncebox: required option '--map <file>' not specified \(see 'oncebox forward airflow --help'\)/);
    const dir = tempDir();
    writeFileSync(join(dir, 'map.json'), JSON.stringify({ batch_ready: 'oncebox_batches' }));
    const args = ['forward', 'airflow', '--server', 'http://127.0.0.1:1', '--airflow', 'http://127.0.0.1:1', '--map', join(dir, 'map.json'), '--db', join(dir, 'f.db')];
    const noCredentials = await runScript(CLI, args, { env: { ONCEBOX_AIRFLOW_USERNAME: '', ONCEBOX_AIRFLOW_PASSWORD: '', ONCEBOX_AIRFLOW_TOKEN: '' } });
    expect(noCredentials.code).toBe(1);
    expect(noCredentials.stderr).toMatch(/no Airflow credentials: set ONCEBOX_AIRFLOW_USERNAME and ONCEBOX_AIRFLOW_PASSWORD .*\[airflow_credentials\]/);
    // Nothing was opened: the forwarder's file is made only once Airflow has answered.
    expect(existsSync(join(dir, 'f.db'))).toBe(false);
  });

  it('prints its version, and for each command and subcommand a help that describes every option', async () => {
    const { version } = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
    expect((await runScript(CLI, ['--version'])).lines).toEqual([{ text: version }]);
    const commands = [['server'], ['relay'], ['status'], ['events'], ['dead', 'list'], ['dead', 'retry'], ['token', 'create'], ['token', 'revoke'], ['forward', 'airflow']];
    for (const command of commands) {
      const help = await runScript(CLI, [...command, '--help']);
      expect(help.code).toBe(0);
      const text = help.lines.map((line) => line.text as string).join('\n');
      expect(text.startsWith(`Usage: oncebox ${command.join(' ')} `), text).toBe(true);
      // Every option line carries a description after its flags.
      const options = text.slice(text.indexOf('Options:')).split('\n').filter((line) => /^ {2}-/.test(line));
      expect(options.length).toBeGreaterThan(1);
      for (const line of options) expect(line, `${command.join(' ')}: ${line}`).toMatch(/^ {2}-\S.*\s{2,}\S/);
    }
    for (const command of ['server', 'relay', 'status', 'events', 'dead', 'token']) {
      expect((await runScript(CLI, [command, '--help'])).lines.map((line) => line.text).join('\n')).toMatch(/Examples?:\n {2}\$ /);
    }
  });

  it('says what a file is when a tool is pointed at the wrong one, and never creates a missing one', async () => {
    const dir = tempDir();
    const serverDb = join(dir, 'server.db');
    await (await startServer({ db: serverDb })).close();
    for (const args of [['status', serverDb], ['relay', serverDb, '--server', 'http://127.0.0.1:9', '--drain'], ['dead', 'list', serverDb]]) {
      const refused = await runScript(CLI, args);
      expect({ args, code: refused.code }).toEqual({ args, code: 1 });
      expect(refused.stderr).toContain(`${serverDb}: cannot use this outbox file (NOT_AN_OUTBOX: it is an oncebox server database, not a producer's outbox file). Point it at the job's outbox file`);
      // Never the advice to move it aside: this is the server's database.
      expect(refused.stderr).not.toMatch(/moved? aside/);
    }
    const misspelt = join(dir, 'orders-ingset.db');
    const relay = await runScript(CLI, ['relay', misspelt, '--server', 'http://127.0.0.1:9', '--drain']);
    expect(relay.code).toBe(1);
    expect(relay.stderr).toContain(`${misspelt}: cannot use this outbox file (ENOENT: no such file; check the path (it is never created here))`);
    expect(existsSync(misspelt)).toBe(false);
    const empty = join(dir, 'empty.db');
    writeFileSync(empty, '');
    expect((await runScript(CLI, ['dead', 'list', empty])).stderr).toContain('it is empty: no job has opened it as an outbox');
  });
});

describe('oncebox relay --drain', () => {
  /** An outbox file with `rows` emissions committed by a job that leaves delivery to `oncebox relay`. */
  async function committed(rows: number, dead = 0): Promise<string> {
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'orders-ingest', run: RUN, relay: 'external' });
    const ready = box.asset('batch_ready');
    box.commit((tx) => {
      for (let i = 1; i <= rows; i++) tx.emit(ready, { partitionKey: `batch-${i}` });
      for (let i = 1; i <= dead; i++) tx.emit(box.asset('nope'), { partitionKey: `dead-${i}` });
    });
    await box.close({ timeoutMs: 0 });
    return path;
  }

  it('prints plain progress lines without a terminal, and exits 0 once all is delivered', async () => {
    const { url } = await startServer();
    const slow = await startFaultProxy(url, { delayMs: 400 });
    slow.plan(...Array<Fault>(20).fill('delay'));
    const path = await committed(2000);
    const relay = await runScript(CLI, ['relay', path, '--server', slow.url, '--drain']);
    expect(relay.code, relay.stderr).toBe(0);
    const texts = relay.lines.map((line) => line.text as string);
    expect(texts.length).toBeGreaterThan(1);
    for (const text of texts.slice(0, -1)) expect(text).toMatch(/^oncebox relay: \d+ events delivered, \d+ pending, 0 dead, \d+ events\/s, time left (\d+ s|unknown)(; \d+ checkpoint updates? pending)?$/);
    expect(texts.at(-1)).toBe('oncebox relay: drained: 2000 events delivered, 0 pending, 0 dead');
  });

  it('drains what a job commits while it runs, and says drained, not interrupted, when it finds nothing pending', async () => {
    const { url } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'orders-ingest', run: RUN, relay: 'external' });
    const ready = box.asset('batch_ready');
    // The job goes on committing, a row every few milliseconds, through three drains one after another:
    // a commit that lands as a drain finds nothing pending is the race this guards.
    let committing = true;
    let rows = 0;
    const job = (async () => {
      while (committing) {
        box.commit((tx) => tx.emit(ready, { partitionKey: `batch-${++rows}` }));
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    try {
      for (let drain = 0; drain < 3; drain++) {
        const relay = await runScript(CLI, ['relay', path, '--server', url, '--drain'], { timeoutMs: 180_000 });
        expect(relay.code, `${JSON.stringify(relay.lines.at(-1))} ${relay.stderr}`).toBe(0);
        expect(relay.lines.at(-1)!.text).toMatch(/^oncebox relay: drained: \d+ events delivered, 0 pending, 0 dead$/);
      }
    } finally {
      committing = false;
      await job;
    }
    const last = await runScript(CLI, ['relay', path, '--server', url, '--drain']);
    expect(last.code, last.stderr).toBe(0);
    await box.close({ timeoutMs: 0 });
    const stored = await allEvents(url);
    expect(stored.map((event) => event.partitionKey)).toEqual(Array.from({ length: rows }, (_, i) => `batch-${i + 1}`));
  });

  it('draws a progress bar on a terminal, and exits 3 when rows are dead', async () => {
    const { url } = await startServer();
    const slow = await startFaultProxy(url, { delayMs: 400 });
    slow.plan(...Array<Fault>(20).fill('delay'));
    const path = await committed(1500, 1);
    // `script` runs the command under a pseudo-terminal, as a person at a terminal would.
    const command = [process.execPath, '--import', 'tsx', CLI, 'relay', path, '--server', slow.url, '--drain'].join(' ');
    // Not spawnSync: the server and the proxy run in this process and must go on answering.
    const child = spawn('script', ['-qefc', command, '/dev/null'], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    const status = await new Promise<number | null>((resolve) => child.on('close', resolve));
    const result = { status, stdout };
    expect(result.status, result.stdout).toBe(3);
    expect(result.stdout).toMatch(/\r\[#*-*\] \d+\/1501 events · \d+ pending · \d+\/s · (\d+ s|unknown) left\u001b\[K/);
    expect(result.stdout).toContain('\r[########################] 1500/1500 events · 0 pending');
    expect(result.stdout).toContain('oncebox relay: drained: 1500 events delivered, 0 pending, 1 dead');
    expect(result.stdout).toContain('1 event is dead');
  });
});

describe('oncebox events', () => {
  const post = (url: string, items: unknown[]) =>
    fetch(`${url}/v1/emissions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ stream: { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 }, items }),
    });
  const event = (seq: number, asset: string, partitionKey: string) => ({ seq, key: crypto.randomUUID(), kind: 'event', asset, partitionKey });

  it('prints the stored events, aligned or as JSON lines, optionally of one asset and after a cursor', async () => {
    const { url } = await startServer();
    await post(url, [event(1, 'batch_ready', 'batch-1'), event(2, 'run_done', 'r'), event(3, 'batch_ready', 'batch-2')]);
    const json = await runScript(CLI, ['events', '--server', url, '--json']);
    expect(json.code, json.stderr).toBe(0);
    expect(json.lines.map((line) => [line.cursor, line.partitionKey])).toEqual([[1, 'batch-1'], [2, 'r'], [3, 'batch-2']]);
    const one = await runScript(CLI, ['events', '--server', url, '--asset', 'batch_ready', '--after', '1']);
    expect(one.lines.map((line) => line.text)).toEqual([
      expect.stringMatching(/^ {7}3 {2}\d{4}-\d\d-\d\dT[\d:.]+Z {2}batch_ready {11}batch-2 {15}p\/w\/r attempt 1 seq 3 {2}[0-9a-f-]{36}$/),
    ]);
    // An asset the server does not have says so, where one with no events yet prints nothing.
    const unknown = await runScript(CLI, ['events', '--server', url, '--asset', 'nope']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('oncebox events: the server has no asset "nope" that this token may read (it has "batch_ready", "run_done"; `oncebox ls assets` lists them)');
    const known = await runScript(CLI, ['events', '--server', url, '--asset', 'batch_ready', '--after', '3']);
    expect([known.code, known.stderr, known.lines]).toEqual([0, '', []]);
    const wrong = await runScript(CLI, ['events', '--server', url, '--after', 'soon']);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain(`oncebox: option '--after <cursor>' argument 'soon' is invalid. must be a cursor (0 or a whole number above), not "soon" (see 'oncebox events --help')`);
    const down = await runScript(CLI, ['events', '--server', 'http://127.0.0.1:9']);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('could not reach http://127.0.0.1:9/v1/events');
  });

  it('follows with the long-poll: a new event is printed as soon as it is stored, until stopped', async () => {
    const { url, server } = await startServer();
    await post(url, [event(1, 'batch_ready', 'batch-1')]);
    const follower = startScript(CLI, ['events', '--server', url, '--follow', '--json']);
    await follower.waitFor((line) => line.partitionKey === 'batch-1');
    await new Promise((resolve) => setTimeout(resolve, 500));
    // Waiting, not polling: a handful of requests in half a second, where a loop would make hundreds.
    const reads = (await server.metrics.getSingleMetricAsString('oncebox_http_requests_total'))
      .split('\n')
      .filter((line) => line.includes('route="/v1/events"'))
      .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
    expect(reads).toBeLessThanOrEqual(3);
    await post(url, [event(2, 'batch_ready', 'batch-2')]);
    await follower.waitFor((line) => line.partitionKey === 'batch-2');
    follower.signal('SIGTERM');
    const result = await follower.done;
    expect(result.code, result.stderr).toBe(0);
    expect(result.lines.map((line) => line.partitionKey)).toEqual(['batch-1', 'batch-2']);
  });
});

function writeAssets(dir: string): string {
  const path = join(dir, 'assets.txt');
  writeFileSync(path, 'batch_ready\n');
  return path;
}
