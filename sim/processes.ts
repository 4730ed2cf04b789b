import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('..', import.meta.url));

/** How a process of the simulation ended: killed at its failpoint, or by itself. */
export interface ProcessOutcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** It died with SIGKILL at its failpoint (it says so on stdout just before). */
  killed: boolean;
  output: string;
}

/** A long-running process of the simulation (a relay command), stopped with a signal when its part is done. */
export interface RunningProcess {
  /** It has not exited. */
  running(): boolean;
  stop(signal: NodeJS.Signals): Promise<ProcessOutcome>;
}

/** Starts `oncebox` itself, as a user runs it (`oncebox relay FILE --server URL`), from the sources. */
export function startOncebox(args: string[], env: Record<string, string>): RunningProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], { cwd: REPO, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let exited = false;
  const done = new Promise<ProcessOutcome>((resolve) =>
    child.on('exit', (code, signal) => {
      exited = true;
      resolve({ code, signal, killed: false, output });
    }),
  );
  return {
    running: () => !exited,
    stop: (signal) => {
      if (!exited) child.kill(signal);
      return done;
    },
  };
}

/**
 * Runs one of the simulation's process scripts (a job, a consumer) with its arguments as JSON and the
 * failpoint that kills it, and waits for it to end: real processes, killed with SIGKILL where chosen.
 */
export function runSimProcess(script: string, args: unknown, failpoint: string): Promise<ProcessOutcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, JSON.stringify(args)], {
      cwd: REPO,
      env: { ...process.env, ONCEBOX_FAILPOINT: failpoint },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve({ code, signal, killed: signal === 'SIGKILL' && output.includes('"kill":true'), output }));
  });
}
