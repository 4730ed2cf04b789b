import fc from 'fast-check';
import type { Fault } from './fault-proxy.js';

/**
 * Where a job can be killed (or stopped, for a zombie), as the named failpoints of oncebox's own code
 * (ONCEBOX_FAILPOINT) that the job passes through:
 * - `before-commit`: `box.commit()` was called; the job's data write for the batch is done, nothing of the
 *   commit is written;
 * - `inside-commit`: inside the commit's transaction, every row written, not yet committed;
 * - `after-commit`: the commit is durable; its emissions are not delivered yet;
 * - `after-delivery`: the server stored a batch and answered; the job has not recorded the receipt;
 * - `inside-terminal-commit`: inside `box.complete()` or `box.fail()`'s transaction;
 * - `consumer-before-handler`, `consumer-after-commit`: a consumer about to hand events to its handler,
 *   and just after it committed their effects and cursor.
 */
export type KillPoint =
  | 'before-commit'
  | 'inside-commit'
  | 'after-commit'
  | 'after-delivery'
  | 'inside-terminal-commit'
  | 'consumer-before-handler'
  | 'consumer-after-commit';

/** @internal The failpoint of oncebox's code behind each kill point. */
export const FAILPOINT_OF: Record<KillPoint, string> = {
  'before-commit': 'commit:before',
  'inside-commit': 'commit:after-write',
  'after-commit': 'commit:after-commit',
  'after-delivery': 'relay:after-response',
  'inside-terminal-commit': 'terminal:after-write',
  'consumer-before-handler': 'consume:before-handler',
  'consumer-after-commit': 'consume:after-commit',
};

/** The kill points of a producer's job. */
export const PRODUCER_POINTS: readonly KillPoint[] = ['before-commit', 'inside-commit', 'after-commit', 'after-delivery', 'inside-terminal-commit'];
/**
 * The kill points of a consumer. `after-commit` is inside its handler, just after `ctx.commit` returned:
 * where an effect written after the commit, rather than in it, is lost.
 */
export const CONSUMER_POINTS: readonly KillPoint[] = ['consumer-before-handler', 'inside-commit', 'after-commit', 'consumer-after-commit', 'after-delivery'];

/** How one attempt of the job ends. */
export type AttemptEnd =
  /** It runs to its end. */
  | { kind: 'completes' }
  /** SIGKILLed the `hit`-th time it reaches `at` (it completes when it never gets there). */
  | { kind: 'killed'; at: KillPoint; hit: number }
  /** SIGKILLed `ms` after it started: wherever it is then. */
  | { kind: 'killed-after'; ms: number }
  /**
   * Stopped (SIGSTOP) the `hit`-th time it reaches `at`, like a worker that lost its heartbeat in a long
   * pause, and left there while the next attempt starts; continued (SIGCONT) as soon as the next attempt
   * has started (`with-next`: both run at once, in whatever interleaving the machine makes), or once it
   * has ended (`after-next`).
   */
  | { kind: 'zombie'; at: KillPoint; hit: number; resume: 'with-next' | 'after-next' }
  /**
   * The `hit`-th commit throws the error SQLite throws when the disk is full (`SQLITE_FULL`) or another
   * process holds the file too long (`SQLITE_BUSY`), and is rolled back: nothing of it is written, and
   * `commit()` raises it as `OutboxWriteError`, as it does a real one. The
   * attempt goes on as the job makes it: a job that lets the error end the attempt is retried, one that
   * commits the batch again goes on; one that skips the batch loses its events.
   */
  | { kind: 'commit-fails'; hit: number; error: CommitError };

/** The errors a commit can meet, as a scenario injects them. */
export type CommitError = 'SQLITE_FULL' | 'SQLITE_BUSY';

/** One attempt of the job's run. */
export interface AttemptPlan {
  /**
   * Where it runs: on the machine of the attempt before it, with its outbox file (`same`), or on a fresh
   * machine with a new, empty file (`fresh`). The job's data store (ONCEBOX_DATA) is shared by all: it
   * stands for the storage the job writes to, not for the machine.
   */
  machine: 'same' | 'fresh';
  end: AttemptEnd;
}

/**
 * A failure scenario: the attempts of one run of the job, in order (a last one that completes is added
 * when the plan ends with a failure: a run is retried until it succeeds), and the network faults between
 * the job and the server, for its first requests in order.
 */
export interface Scenario {
  attempts: AttemptPlan[];
  network: Fault[];
}

/** What `scenarioArbitrary` draws from. */
export interface ScenarioOptions {
  /** Attempts planned before the last one. @defaultValue 3 */
  maxAttempts?: number;
  /** Where a job may be killed. @defaultValue PRODUCER_POINTS */
  points?: readonly KillPoint[];
  /**
   * The highest `hit` drawn, where `reach` does not say. @defaultValue 4
   */
  maxHit?: number;
  /**
   * How often a clean run of the job passes each point (`checkJob` measures it): points it never reaches
   * are not drawn, and each point's `hit` is drawn up to its count, so that every kill lands.
   */
  reach?: Partial<Record<KillPoint, number>> | undefined;
  /** Whether a commit may throw (a full disk, a busy file). @defaultValue true */
  commitErrors?: boolean;
  /** Whether attempts may be zombies. @defaultValue true */
  zombies?: boolean;
  /**
   * Whether an attempt may be killed after a random time, wherever it is then. Such a kill lands where the
   * machine happens to be, so a seed replays it only roughly. @defaultValue false
   */
  timedKills?: boolean;
  /** Network faults at most, among the first requests. @defaultValue 6 (0 turns them off) */
  maxFaults?: number;
}

/**
 * Failure scenarios for fast-check: `fc.assert(fc.asyncProperty(scenarioArbitrary(), …))`. fast-check
 * shrinks a failing one towards fewer attempts, earlier kill points and fewer faults.
 */
export function scenarioArbitrary(options: ScenarioOptions = {}): fc.Arbitrary<Scenario> {
  const points = reachablePoints(options);
  const { reach } = options;
  const maxHit = reach === undefined ? (options.maxHit ?? 4) : Math.max(1, ...points.map((point) => reach[point] ?? 1));
  // A hit past a point's count would never land: it wraps round to one that does, and still shrinks to 1.
  const landing = (at: KillPoint, hit: number) => (reach?.[at] ? 1 + ((hit - 1) % reach[at]) : hit);
  const point = fc.record({ at: fc.constantFrom(...points), hit: fc.integer({ min: 1, max: maxHit }) }).map(({ at, hit }) => ({ at, hit: landing(at, hit) }));
  const ends: fc.Arbitrary<AttemptEnd>[] = [point.map((where) => ({ kind: 'killed' as const, ...where })), fc.constant({ kind: 'completes' as const })];
  if (options.zombies ?? true) {
    ends.push(fc.record({ where: point, resume: fc.constantFrom('with-next' as const, 'after-next' as const) }).map(({ where, resume }) => ({ kind: 'zombie' as const, ...where, resume })));
  }
  // A commit error lands on a commit a clean run makes (its transactions pass `inside-commit`).
  const commits = reach?.['inside-commit'];
  if ((options.commitErrors ?? true) && commits !== 0) {
    const hit = fc.integer({ min: 1, max: commits ?? options.maxHit ?? 4 });
    ends.push(fc.record({ kind: fc.constant('commit-fails' as const), hit, error: fc.constantFrom<CommitError>('SQLITE_FULL', 'SQLITE_BUSY') }));
  }
  if (options.timedKills) ends.push(fc.record({ kind: fc.constant('killed-after' as const), ms: fc.integer({ min: 0, max: 1500 }) }));
  const attempt = fc.record({ machine: fc.constantFrom('same' as const, 'fresh' as const), end: fc.oneof(...ends) });
  const fault = fc.constantFrom<Fault>('forward', 'drop-request', 'drop-response', 'duplicate', 'delay', 'fail-503');
  return fc.record({
    attempts: fc.array(attempt, { minLength: 1, maxLength: options.maxAttempts ?? 3 }),
    network: fc.array(fault, { maxLength: options.maxFaults ?? 6 }),
  });
}

/**
 * Every single kill, before anything random: the job killed at each point it reaches, the first time and
 * the last, then retried once on the same machine and once on a fresh one. Small, and where the plain
 * mistakes show (a data write that appends, an emission outside its commit, a payload that changes).
 */
export function singleKills(options: ScenarioOptions = {}): Scenario[] {
  const scenarios: Scenario[] = [];
  for (const at of reachablePoints(options)) {
    const last = options.reach?.[at] ?? options.maxHit ?? 4;
    for (const hit of [...new Set([1, last])]) {
      for (const machine of ['same', 'fresh'] as const) {
        scenarios.push({ attempts: [{ machine: 'same', end: { kind: 'killed', at, hit } }, { machine, end: { kind: 'completes' } }], network: [] });
      }
    }
  }
  // A full disk at the first commit and at the last: the job must not go on as if the batch were committed.
  const commits = options.reach?.['inside-commit'] ?? options.maxHit ?? 4;
  if ((options.commitErrors ?? true) && commits > 0) {
    for (const hit of [...new Set([1, commits])]) {
      scenarios.push({ attempts: [{ machine: 'same', end: { kind: 'commit-fails', hit, error: 'SQLITE_FULL' } }, { machine: 'same', end: { kind: 'completes' } }], network: [] });
    }
  }
  return scenarios;
}

/** The points to kill at: those asked for that a clean run reaches (all of them when none is known to be). */
function reachablePoints(options: ScenarioOptions): KillPoint[] {
  const points = options.points ?? PRODUCER_POINTS;
  const reached = points.filter((point) => options.reach === undefined || (options.reach[point] ?? 0) > 0);
  return reached.length === 0 ? [...points] : reached;
}

/** The attempts a scenario runs: its plan, and a last one that completes when the plan ends in a failure. */
export function attemptsOf(scenario: Scenario): AttemptPlan[] {
  const last = scenario.attempts.at(-1);
  return last?.end.kind === 'completes' ? scenario.attempts : [...scenario.attempts, { machine: 'same', end: { kind: 'completes' } }];
}

/** A scenario in words, one line per step, as a failure report shows it. */
export function describeScenario(scenario: Scenario): string[] {
  const lines = attemptsOf(scenario).map((plan, index) => {
    const where = index === 0 ? 'on machine 1' : plan.machine === 'same' ? 'on the same machine (same outbox file)' : 'on a fresh machine (new outbox file)';
    const end = plan.end;
    const how =
      end.kind === 'completes'
        ? 'runs to its end'
        : end.kind === 'killed'
          ? `SIGKILLed at ${end.at} (time ${end.hit})`
          : end.kind === 'killed-after'
            ? `SIGKILLed ${end.ms} ms after it started`
            : end.kind === 'commit-fails'
              ? `its commit ${end.hit} throws ${end.error} (${end.error === 'SQLITE_FULL' ? 'the disk is full' : 'the file is locked'}) and is rolled back; it goes on as the job makes it`
              : `stopped at ${end.at} (time ${end.hit}) and left as a zombie, continued ${end.resume === 'with-next' ? 'as the next attempt starts' : 'once the next attempt has ended'}`;
    const added = index >= scenario.attempts.length ? ' (added: a run is retried until it succeeds)' : '';
    return `attempt ${index + 1} ${where}: ${how}${added}`;
  });
  const faults = scenario.network.filter((fault) => fault !== 'forward');
  lines.push(faults.length === 0 ? 'network: no faults' : `network, for the first requests in order: ${scenario.network.join(', ')}`);
  return lines;
}
