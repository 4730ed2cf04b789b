import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnBundled } from '../src/testing/bundle.js';

const REPO = fileURLToPath(new URL('..', import.meta.url));

/** How a process of the simulation ended: killed at its failpoint, or by itself. */
export interface ProcessOutcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** It died with SIGKILL at its failpoint (it says so on stdout just before). */
  killed: boolean;
  output: string;
}

/** A process of the simulation, started from the sources with tsx: it runs until it ends, or is stopped with a signal. */
export interface RunningProcess {
  /** It has not exited. */
  running(): boolean;
  /** What it printed so far, stdout and stderr together. */
  output(): string;
  /** Sends it a signal (SIGSTOP, SIGCONT) without waiting for it to end. */
  signal(signal: NodeJS.Signals): void;
  stop(signal: NodeJS.Signals): Promise<ProcessOutcome>;
  /** How it ended, once it has. */
  done: Promise<ProcessOutcome>;
}

/** Starts a script of the repository (a path from its root), bundled as the tests run theirs (spawnBundled), its output kept. */
export function startProcess(script: string, args: string[], env: Record<string, string>): RunningProcess {
  let output = '';
  let exited = false;
  const started = spawnBundled(resolve(REPO, script), args, { cwd: REPO, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const send = (signal: NodeJS.Signals) => {
    if (!exited) started.signal(signal);
  };
  const done = started.started.then(
    (spawned) =>
      new Promise<ProcessOutcome>((resolve, reject) => {
        spawned.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
        spawned.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
        spawned.on('error', reject);
        spawned.on('exit', (code, signal) => {
          exited = true;
          resolve({ code, signal, killed: signal === 'SIGKILL' && output.includes('"kill":true'), output });
        });
      }),
  );
  return {
    running: () => !exited,
    output: () => output,
    signal: send,
    stop: (signal) => {
      send(signal);
      return done;
    },
    done,
  };
}

/** Starts `oncebox` itself, as a user runs it (`oncebox relay FILE --server URL`), from the sources. */
export function startOncebox(args: string[], env: Record<string, string>): RunningProcess {
  return startProcess('src/cli/main.ts', args, env);
}

/**
 * Runs one of the simulation's process scripts (a job, a consumer) with its arguments as JSON and the
 * failpoint that kills it, and waits for it to end: real processes, killed with SIGKILL where chosen.
 */
export function runSimProcess(script: string, args: unknown, failpoint: string): Promise<ProcessOutcome> {
  return startSimProcess(script, args, failpoint).done;
}

/** As runSimProcess, without waiting: for a process the simulation stops (SIGSTOP) and continues. */
export function startSimProcess(script: string, args: unknown, failpoint: string): RunningProcess {
  return startProcess(script, [JSON.stringify(args)], { ONCEBOX_FAILPOINT: failpoint });
}
