import { spawn, type ChildProcess } from 'node:child_process';
import { request, type Agent } from 'node:http';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

export const repo = fileURLToPath(new URL('..', import.meta.url));

export function benchDir(): string {
  return mkdtempSync(join(tmpdir(), 'oncebox-bench-'));
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/**
 * Runs `a` and `b` alternately for `rounds` rounds and returns each one's median rate, so that both see
 * the same machine noise: on a shared 2-core machine only ratios measured side by side mean anything.
 */
export async function sideBySide(rounds: number, a: () => Promise<number> | number, b: () => Promise<number> | number) {
  const ra: number[] = [];
  const rb: number[] = [];
  for (let i = 0; i < rounds; i++) {
    ra.push(await a());
    rb.push(await b());
  }
  return { a: median(ra), b: median(rb) };
}

export interface ServerProcess {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/** A server script in its own process, as in production; resolves once it prints its URL. */
export function spawnServer(args: readonly string[]): Promise<ServerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise<ServerProcess>((resolve, reject) => {
    let buffered = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const match = /"url":"([^"]+)"/.exec(buffered);
      if (match) {
        resolve({
          url: match[1]!,
          child,
          stop: () =>
            new Promise((done) => {
              if (child.exitCode !== null) return done();
              child.once('exit', () => done());
              child.kill('SIGTERM');
            }),
        });
      }
    });
    child.on('exit', (code) => reject(new Error(`${args.join(' ')}: exited ${code} before it listened`)));
  });
}

/** `oncebox server` over `db` (a SQLite file or a postgres:// URL), at default durability. */
export function startOnceboxServer(dir: string, db: string, schema?: string): Promise<ServerProcess> {
  const assets = join(dir, 'assets.txt');
  writeFileSync(assets, 'batch_ready\n');
  const args = ['src/cli/main.ts', 'server', '--db', db, '--port', '0', '--assets', assets];
  if (schema) args.push('--schema', schema);
  return spawnServer(args);
}

/** `oncebox server` on a SQLite file in `dir`. */
export function startServerProcess(dir: string): Promise<ServerProcess> {
  return startOnceboxServer(dir, join(dir, 'server.db'));
}

/**
 * CPU seconds used so far by the given child processes, every `postgres` process and (unless told not
 * to) this process, read from /proc; null where /proc cannot be read. Shows whether the cores were all
 * busy, and, without this process (the load generator), what the server side spent.
 */
export function cpuSeconds(pids: readonly number[], includeSelf = true): number | null {
  try {
    const ticks = (pid: number) => {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return Number(fields[11]) + Number(fields[12]);
    };
    let total = 0;
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') total += ticks(Number(entry));
      } catch {
        // The process ended between the listing and the read.
      }
    }
    for (const pid of pids) total += ticks(pid);
    const own = process.cpuUsage();
    // USER_HZ is 100 on every Linux this runs on.
    return total / 100 + (includeSelf ? (own.user + own.system) / 1e6 : 0);
  } catch {
    return null;
  }
}

/** Why PostgreSQL at `url` cannot be used (its error's message), or null when it answers. */
export async function postgresMissing(url: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return null;
  } catch (error) {
    return (error as Error).message;
  } finally {
    await client.end().catch(() => {});
  }
}

/** One request on `agent`'s sockets; resolves with the status once the answer is read. */
export function httpCall(agent: Agent, url: string, method: string, path: string, body?: string, signal?: AbortSignal): Promise<number> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ agent, host: hostname, port, method, path, signal, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Drops a server's PostgreSQL schema once a bench is done with it. */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}
