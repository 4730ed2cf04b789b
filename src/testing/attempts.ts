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
  /** What it wrote on stderr, for the report: the line naming its error, and the last lines. */
  stderrTail: string;
  /** With `trace`: how often it passed each failpoint of oncebox's code. */
  failpointHits?: Record<string, number>;
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
 * through oncebox's failpoints, or killed after a time. It is long because one child's life is one
 * closure: its output, the signals sent to its group and its end share their state.
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
  /** Count the failpoints it passes instead of killing it anywhere (a clean run's profile). */
  trace?: boolean;
}): RunningAttempt {
  const { end } = options;
  const failpoint =
    end.kind === 'killed'
      ? `${FAILPOINT_OF[end.at]}@${end.hit}`
      : end.kind === 'zombie'
        ? `${FAILPOINT_OF[end.at]}@${end.hit}:stop`
        : end.kind === 'commit-fails'
          ? `${FAILPOINT_OF['inside-commit']}@${end.hit}:throw=${end.error}`
          : options.trace
            ? 'trace'
            : undefined;
  const env = { ...inheritedEnvironment(), ...options.env, ...(failpoint ? { ONCEBOX_FAILPOINT: failpoint } : {}) };
  // Its own process group: a job started through a wrapper (a shell script, npx) is stopped, continued and
  // killed whole, not only the wrapper.
  const child = spawn(options.executable, options.args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, signal);
    } catch {
      // The group is gone already.
    }
  };
  let stderr = '';
  let stdout = '';
  let reachedPoint = false;
  let timedOut = false;
  let resolveStopped: (stopped: boolean) => void = () => {};
  const stopped = new Promise<boolean>((resolve) => (resolveStopped = resolve));
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout = (stdout + chunk).slice(-STDERR_KEPT);
    // oncebox's failpoint says where it stops or dies, just before it does.
    if (end.kind === 'zombie' && stdout.includes('"stop":true')) {
      reachedPoint = true;
      resolveStopped(true);
    }
    if (end.kind === 'commit-fails' && stdout.includes('"throw":')) reachedPoint = true;
    if (end.kind === 'killed' && stdout.includes('"kill":true')) {
      reachedPoint = true;
      // The job died at its point; a wrapper around it goes with it.
      signalGroup('SIGKILL');
    }
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-STDERR_KEPT * 4)));
  const timer = setTimeout(() => {
    timedOut = true;
    signalGroup('SIGCONT');
    signalGroup('SIGKILL');
  }, options.timeoutMs);
  const killTimer =
    end.kind === 'killed-after'
      ? setTimeout(() => {
          reachedPoint = true;
          signalGroup('SIGKILL');
        }, end.ms)
      : undefined;
  const ended = new Promise<AttemptRecord>((resolve, reject) => {
    child.on('error', reject);
    // 'exit', not 'close': a process the job left behind may hold its pipes open for long after.
    child.on('exit', (exitCode, signal) => {
      clearTimeout(timer);
      clearTimeout(killTimer);
      // Its last output gets a moment to arrive, not more.
      const settle = () => {
        resolveStopped(false);
        if (end.kind === 'killed' && stdout.includes('"kill":true')) reachedPoint = true;
        const hits = options.trace ? /\{"failpointHits":(\{[^}]*\})\}/.exec(stdout)?.[1] : undefined;
        resolve({
          attempt: options.attempt,
          outbox: options.outbox,
          planned: end.kind,
          reachedPoint,
          exitCode,
          signal,
          timedOut,
          stderrTail: stderrSummary(stderr),
          ...(hits === undefined ? {} : { failpointHits: JSON.parse(hits) as Record<string, number> }),
        });
      };
      const drained = Promise.all([child.stdout, child.stderr].map((stream) => new Promise((done) => (stream.readableEnded ? done(undefined) : stream.once('end', done)))));
      void Promise.race([drained, new Promise((done) => setTimeout(done, 500))]).then(settle);
    });
  });
  return {
    stopped,
    ended,
    resume: () => signalGroup('SIGCONT'),
    kill: () => {
      signalGroup('SIGCONT');
      signalGroup('SIGKILL');
    },
  };
}

/**
 * What an attempt's stderr says, for the report: the first line that names an error (a thrown error's
 * message comes before its stack), then the last lines.
 */
export function stderrSummary(stderr: string): string {
  const lines = stderr.trim().split('\n');
  const tail = lines.slice(-6);
  // Node prints an uncaught error as its source line, a caret, then `Name: message` at the start of a
  // line: that line, not the source line that made the error, says what went wrong.
  // `Error: ENOENT: …` (a system error) names no class of its own: the prefix is optional.
  const named = lines.find((line) => /^(Uncaught )?([A-Z]\w*)?(Error|Exception)( \[[^\]]*\])?: /.test(line));
  return named === undefined || tail.includes(named) ? tail.join('\n') : [named, '…', ...tail].join('\n');
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
