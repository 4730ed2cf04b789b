import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('../..', import.meta.url));

export interface ChildResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  lines: Record<string, unknown>[];
  stderr: string;
}

/**
 * Runs a TypeScript script of this repo in a real child process and collects its JSON-lines output.
 * `onLine` may kill the child (with SIGKILL) at a moment of the test's choosing.
 */
export function runScript(
  script: string,
  args: string[],
  options: { env?: Record<string, string>; onLine?: (line: Record<string, unknown>, kill: () => void) => void; timeoutMs?: number } = {},
): Promise<ChildResult> {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: REPO,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  let stderr = '';
  let buffered = '';
  const kill = () => child.kill('SIGKILL');
  const timer = setTimeout(kill, options.timeoutMs ?? 45_000);
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
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
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, lines, stderr });
    });
  });
}
