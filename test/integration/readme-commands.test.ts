import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanCopy } from '../../scripts/clean-copy.js';
import { REPO } from '../support/child.js';

/**
 * The first hour, as a new user lives it: the README's Quickstart and docs/consumers.md's examples, run
 * command by command exactly as the docs write them (tokens, files and port included), in a clean copy
 * of this repository, from the shell. Each must end as the docs say. The server runs as the docs start it,
 * under `npm run`, and stops when npm is killed, as it would in a terminal.
 */
const PORT = 8787;
const copy = cleanCopy(REPO, 'oncebox-readme-');
// A clone's `npm ci` builds the web console (prepare); the copy shares node_modules instead of
// installing, so it builds the console as npm ci would.
const consoleBuild = spawnSync(join(REPO, 'node_modules/.bin/vite'), ['build', '--config', 'console/vite.config.ts'], { cwd: copy, encoding: 'utf8' });
if (consoleBuild.status !== 0) throw new Error(`building the console in the copy failed: ${consoleBuild.stderr}`);
const children: ChildProcess[] = [];
afterAll(() => {
  // Each command's whole process group: a SIGKILLed npm cannot pass the signal on to the server it ran.
  for (const child of children) {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
  rmSync(copy, { recursive: true, force: true });
});

/** The shell commands of the ```sh blocks under a heading (up to the next heading of its level), comments left in. */
function shellBlocks(markdown: string, heading: string): string[][] {
  const start = markdown.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`no heading "${heading}"`);
  const level = heading.split(' ')[0]!;
  const end = markdown.indexOf(`\n${level} `, start + heading.length + 2);
  const section = markdown.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!.split('\n').filter((line) => line.trim() !== '' && !line.trim().startsWith('#')));
}

/** The environment of a new user's shell: none of the test's own oncebox settings. */
function userEnvironment(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('ONCEBOX_') && !name.startsWith('VITEST') && name !== 'NODE_OPTIONS'));
}

function run(command: string): { code: number | null; stdout: string; stderr: string } {
  const result = spawnSync('bash', ['-c', command], { cwd: copy, env: userEnvironment(), encoding: 'utf8', timeout: 120_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** A command that runs until stopped, with its output lines as they come. */
function start(command: string): { child: ChildProcess; lines: string[]; waitFor: (match: (line: string) => boolean, what: string) => Promise<string>; exited: Promise<number | null> } {
  // bash runs a lone command in its own process (it execs it), so the child's pid is the command's, as a
  // terminal job's would be; its own process group holds whatever the command starts.
  const child = spawn('bash', ['-c', command], { cwd: copy, env: userEnvironment(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.push(child);
  const lines: string[] = [];
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    lines.push(...chunk.split('\n').filter(Boolean));
    for (const listener of listeners) listener();
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const waitFor = (match: (line: string) => boolean, what: string) =>
    new Promise<string>((resolve, reject) => {
      const look = () => {
        const found = lines.find(match);
        if (found === undefined) return;
        listeners.delete(look);
        clearTimeout(timer);
        resolve(found);
      };
      const timer = setTimeout(() => reject(new Error(`${what}: not seen within 60 s in:\n${lines.join('\n')}\nstderr:\n${stderr}`)), 60_000);
      listeners.add(look);
      // Its last lines may still be on their way when the command exits: they get a moment.
      void exited.then(() => setTimeout(() => reject(new Error(`${what}: the command exited first:\n${lines.join('\n')}\nstderr:\n${stderr}`)), 2000));
      look();
    });
  return { child, lines, waitFor, exited };
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

const json = (line: string): Record<string, unknown> => {
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return {};
  }
};

const portTaken = await portOpen(PORT);
if (portTaken && process.env.CI === 'true') throw new Error(`port ${PORT}, which the README's commands use, is taken: stop whatever listens there`);
if (portTaken) console.warn(`README commands skipped: port ${PORT}, which they use, is taken`);

describe.skipIf(portTaken)(`the README's and docs' commands, as written, in a clean copy${portTaken ? ` (skipped: port ${PORT} is taken)` : ''}`, () => {
  it('start a server with tokens, run the job twice, run both consumer examples, and stop the server by killing npm', { timeout: 300_000 }, async () => {
    const readme = readFileSync(join(copy, 'README.md'), 'utf8');
    const [setup, otherTerminal, seeIt] = shellBlocks(readme, '## Quickstart');
    expect(setup!.length).toBeGreaterThanOrEqual(3);

    // The setup: every command but the server's ends with status 0; the server runs until stopped.
    let server: ReturnType<typeof start> | undefined;
    for (const command of setup!) {
      if (command.startsWith('npm run oncebox -- server')) {
        server = start(command);
        const listening = json(await server.waitFor((line) => json(line).event === 'listening', 'the server starting'));
        expect(listening).toMatchObject({ url: `http://127.0.0.1:${PORT}`, auth: 'on', assets: ['batch_ready'] });
        continue;
      }
      const result = run(command);
      expect({ command, code: result.code, stderr: result.stderr }).toEqual({ command, code: 0, stderr: expect.any(String) });
    }
    expect(server).toBeDefined();

    // In another terminal: the job's token, then the job, twice: the first run publishes each batch, the
    // second resumes and publishes nothing new.
    const [tokenCommand, ...job] = otherTerminal!;
    const token = run(tokenCommand!);
    expect(token.code, token.stderr).toBe(0);
    expect(token.stderr).toBe('');
    expect(job).toHaveLength(2);
    const first = run(job![0]!);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/batch-1: published as event [0-9a-f-]{36}\nbatch-2: published as event/);
    const second = run(job![1]!);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toMatch(/^run \d{4}-\d\d-\d\d, attempt 2: resuming at batch 4; its checkpoint says 3 are done$/m);
    expect(second.stdout).toMatch(/done: published before, as event [0-9a-f-]{36}; this retry added nothing/);

    // See it: a read token for the console, the runs listed, and the console served.
    const [consoleToken, list] = seeIt!;
    expect(run(consoleToken!)).toMatchObject({ code: 0, stderr: '' });
    const listed = run(list!);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/run\s+orders-ingest\/\d{4}-\d\d-\d\d\/ingest\s+(running|succeeded)/);
    const page = await fetch(`http://127.0.0.1:${PORT}/console/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<div id="app">');

    // docs/consumers.md: register the consumers' assets, make their tokens, and run both examples.
    const consumers = readFileSync(join(copy, 'docs/consumers.md'), 'utf8');
    const [examples] = shellBlocks(consumers, '## Run the examples');
    const running: ReturnType<typeof start>[] = [];
    for (const command of examples!) {
      if (command.includes('examples/')) {
        running.push(start(command));
        continue;
      }
      const result = run(command);
      expect({ command, code: result.code, stderr: result.stderr }).toEqual({ command, code: 0, stderr: expect.any(String) });
    }
    const [summariser, trigger] = running;
    expect(json(await summariser!.waitFor((line) => json(line).event === 'start', 'the summariser starting'))).toMatchObject({ resumedFrom: 'start' });
    await summariser!.waitFor((line) => json(line).partitionKey === 'done', 'the summariser consuming the last batch');
    expect(summariser!.lines.filter((line) => json(line).event === 'consumed').map((line) => json(line).partitionKey)).toEqual(['batch-1', 'batch-2', 'batch-3', 'done']);
    await trigger!.waitFor((line) => json(line).partition === 'done', 'the trigger firing for the last batch');
    expect(trigger!.lines.filter((line) => json(line).event === 'fired').map((line) => json(line).partition).sort()).toEqual(['batch-1', 'batch-2', 'batch-3', 'done']);
    // Ctrl-C: the terminal signals the job's whole process group. Each example stops after the event in
    // hand and closes its file (npx itself simply dies of the signal, as in a terminal).
    for (const consumer of running) process.kill(-consumer.child.pid!, 'SIGINT');
    for (const consumer of running) expect(json(await consumer.waitFor((line) => json(line).event === 'done', 'a clean stop on Ctrl-C'))).toMatchObject({ pending: 0 });

    // The server was started by npm: killing npm, as a user kills a background job, stops it too.
    server!.child.kill('SIGTERM');
    await server!.exited;
    const deadline = Date.now() + 10_000;
    while ((await portOpen(PORT)) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await portOpen(PORT)).toBe(false);
  });
});
