import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

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

/** `oncebox server` in its own process, as in production, at default durability. */
export async function startServerProcess(dir: string): Promise<ServerProcess> {
  const assets = join(dir, 'assets.txt');
  writeFileSync(assets, 'batch_ready\n');
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'server', '--db', join(dir, 'server.db'), '--port', '0', '--assets', assets], {
    cwd: repo,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let buffered = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const match = /"url":"([^"]+)"/.exec(buffered);
      if (match) resolve(match[1]!);
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  return {
    url,
    child,
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
