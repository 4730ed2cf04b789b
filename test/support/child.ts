import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnBundled } from '../../src/testing/bundle.js';
import { afterEach } from 'vitest';

export const REPO = fileURLToPath(new URL('../..', import.meta.url));

export interface ChildResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  lines: Record<string, unknown>[];
  stderr: string;
  /** It ran past its time limit and was killed by it, not by the test or a failpoint. */
  timedOut: boolean;
}

export interface StartedScript {
  /** Resolves with the first output line that `match` accepts. */
  waitFor(match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  signal(name: NodeJS.Signals): void;
  /** Every output line so far. */
  lines(): Record<string, unknown>[];
  done: Promise<ChildResult>;
}

/**
 * Starts a long-running script (a server, a relay) and lets the test wait for its output lines. It is
 * killed after `timeoutMs` (a safety net; a test that runs longer passes its own timeout, so that its
 * test timeout, not this one, is the limit) and after the test in any case.
 */
export function startScript(script: string, args: string[], env: Record<string, string> = {}, { timeoutMs = 120_000 }: { timeoutMs?: number } = {}): StartedScript {
  const waiters: { match: (line: Record<string, unknown>) => boolean; resolve: (line: Record<string, unknown>) => void }[] = [];
  const seen: Record<string, unknown>[] = [];
  const done = runScript(script, args, {
    env,
    timeoutMs,
    onLine: (line) => {
      seen.push(line);
      for (const waiter of [...waiters]) {
        if (waiter.match(line)) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve(line);
        }
      }
    },
  });
  started.push(() => signals.get(done)?.('SIGKILL'));
  return {
    waitFor: (match) =>
      new Promise((resolve, reject) => {
        const found = seen.find(match);
        if (found) return resolve(found);
        waiters.push({ match, resolve });
        void done.then((result) => reject(new Error(`${script} exited (${result.code ?? result.signal}) first: ${result.stderr}`)));
      }),
    signal: (name) => {
      signals.get(done)?.(name);
    },
    lines: () => [...seen],
    done,
  };
}

const started: (() => void)[] = [];
const signals = new WeakMap<Promise<ChildResult>, (signal: NodeJS.Signals) => void>();

afterEach(() => {
  for (const kill of started.splice(0)) kill();
});

/**
 * Runs a TypeScript script of this repo in a real child process and collects its JSON-lines output.
 * `onLine` may kill the child (with SIGKILL) at a moment of the test's choosing. The script runs bundled
 * (spawnBundled), so that starting it costs about a fifth of the CPU `tsx` takes.
 */
export function runScript(
  script: string,
  args: string[],
  options: { env?: Record<string, string>; onLine?: (line: Record<string, unknown>, kill: () => void) => void; timeoutMs?: number } = {},
): Promise<ChildResult> {
  const { started, signal: send } = spawnBundled(resolve(REPO, script), args, {
    cwd: REPO,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const kill = () => send('SIGKILL');
  const result = started.then((spawned) => {
    const lines: Record<string, unknown>[] = [];
    let stderr = '';
    let buffered = '';
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, options.timeoutMs ?? 150_000);
    spawned.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      let newline;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        const text = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        let line: Record<string, unknown>;
        try {
          line = JSON.parse(text);
        } catch {
          line = { text };
        }
        lines.push(line);
        options.onLine?.(line, kill);
      }
    });
    spawned.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    return new Promise<ChildResult>((resolve, reject) => {
      spawned.on('error', reject);
      spawned.on('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code, signal, lines, stderr, timedOut });
      });
    });
  });
  signals.set(result, send);
  return result;
}
