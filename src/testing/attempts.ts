import { spawn } from 'node:child_process';
import { FAILPOINT_OF, type AttemptEnd } from './scenario.js';

/** How one attempt ended, as the report shows it. */
export interface AttemptRecord {
  attempt: number;
  outbox: string;
  /** As planned: the plan's end. */
  planned: AttemptEnd['kind'];
  /** Whether it reached its kill or stop point (a job may end before the n-th commit). */
  reachedPoint: boolean;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** It ran past the job's time limit and was killed by the harness. */
  timedOut: boolean;
  /** The last lines it wrote on stderr, for the report. */
  stderrTail: string;
}

/** @internal One attempt, started: it may stop at its point (a zombie), and ends sooner or later. */
export interface RunningAttempt {
  /** Resolves true when it stopped at its point (SIGSTOP), false when it exited without getting there. */
  stopped: Promise<boolean>;
  /** Resolves once it has exited, however. */
  ended: Promise<AttemptRecord>;
  resume(): void;
  kill(): void;
}

const STDERR_KEPT = 2000;

/**
 * Starts one attempt of the job as a child process, armed to be killed or stopped at its plan's point
 * through oncebox's failpoints, or killed after a time.
 * @internal
 */
export function startAttempt(options: {
  executable: string;
  args: string[];
  env: Record<string, string>;
  attempt: number;
  outbox: string;
  end: AttemptEnd;
  timeoutMs: number;
}): RunningAttempt {
  const { end } = options;
  const failpoint =
    end.kind === 'killed' ? `${FAILPOINT_OF[end.at]}@${end.hit}` : end.kind === 'zombie' ? `${FAILPOINT_OF[end.at]}@${end.hit}:stop` : undefined;
  const env = { ...inheritedEnvironment(), ...options.env, ...(failpoint ? { ONCEBOX_FAILPOINT: failpoint } : {}) };
  const child = spawn(options.executable, options.args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  let reachedPoint = false;
  let timedOut = false;
  let resolveStopped: (stopped: boolean) => void = () => {};
  const stopped = new Promise<boolean>((resolve) => (resolveStopped = resolve));
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout = (stdout + chunk).slice(-STDERR_KEPT);
    // oncebox's failpoint says where it stops, just before it does.
    if (end.kind === 'zombie' && stdout.includes('"stop":true')) {
      reachedPoint = true;
      resolveStopped(true);
    }
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-STDERR_KEPT)));
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }, options.timeoutMs);
  const killTimer = end.kind === 'killed-after' ? setTimeout(() => child.kill('SIGKILL'), end.ms) : undefined;
  const ended = new Promise<AttemptRecord>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (exitCode, signal) => {
      clearTimeout(timer);
      clearTimeout(killTimer);
      resolveStopped(false);
      if (end.kind === 'killed' && signal === 'SIGKILL' && !timedOut) reachedPoint = true;
      if (end.kind === 'killed-after' && signal === 'SIGKILL' && !timedOut) reachedPoint = true;
      resolve({ attempt: options.attempt, outbox: options.outbox, planned: end.kind, reachedPoint, exitCode, signal, timedOut, stderrTail: stderr.trim().split('\n').slice(-8).join('\n') });
    });
  });
  return {
    stopped,
    ended,
    resume: () => child.kill('SIGCONT'),
    kill: () => {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    },
  };
}

/** The test process's environment, without the oncebox settings of its own that must not leak into the job. */
function inheritedEnvironment(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined || name === 'ONCEBOX_FAILPOINT' || name === 'ONCEBOX_TOKEN' || name === 'ONCEBOX_OUTBOX' || name === 'ONCEBOX_SERVER') continue;
    env[name] = value;
  }
  return env;
}
