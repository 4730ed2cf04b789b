import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeadLetters } from '../outbox/file/dead-letters.js';
import { OutboxFile } from '../outbox/file/outbox-file.js';
import { canonicalJson } from '../protocol/canonical-json.js';
import { ProducerErrorCode } from '../protocol/errors.js';
import { isLifecycleAsset } from '../protocol/lifecycle.js';
import { startAttempt, type AttemptRecord, type RunningAttempt } from './attempts.js';
import { snapshotDataStore } from './data-store.js';
import { checkHistory, describeAnomalies, type Anomaly, type RunHistory } from './history.js';
import { commandLine, type JobUnderTest } from './job.js';
import { attemptsOf, describeScenario, FAILPOINT_OF, type AttemptPlan, type KillPoint, type Scenario } from './scenario.js';
import { startTestServer, type TestServer } from './test-server.js';

/** What running a job through one scenario showed. */
export interface ScenarioOutcome {
  scenario: Scenario;
  attempts: AttemptRecord[];
  /** Empty when the run's history is a clean run's. */
  anomalies: Anomaly[];
  ok: boolean;
  /** The scenario, each attempt's end, and each anomaly, in words. */
  report: string;
}

const DEFAULT_RUN_ID = 'run-1';
/** Attempts added, at most, after one that failed by itself: a scheduler's retries. */
const MAX_RETRIES_AFTER_FAILURE = 3;
const CLEAN: Scenario = { attempts: [{ machine: 'same', end: { kind: 'completes' } }], network: [] };

/**
 * Runs the job through a scenario on a fresh test server, then checks the history it left against a
 * clean run of the same job (run once, and kept for the job object): the events on the server, the
 * checkpoints, the data store, what its outbox files refused. Attempts that nothing killed must end with
 * status 0; a zombie may end as it likes (a FencedError is its right end).
 */
export async function runScenario(job: JobUnderTest, scenario: Scenario): Promise<ScenarioOutcome> {
  const expected = (await cleanProfile(job)).history;
  const { history, attempts, problems } = await execute(job, scenario);
  const anomalies = [...problems, ...checkHistory(expected, history)];
  return outcome(scenario, attempts, anomalies);
}

/** Throws an error whose message is the outcome's report, unless the outcome is clean: for any test runner. */
export function assertClean(outcome: ScenarioOutcome): void {
  if (!outcome.ok) throw new Error(outcome.report);
}

/** @internal What a clean run of the job shows: its history, and how often it reaches each kill point. */
export interface CleanProfile {
  history: RunHistory;
  reach: Partial<Record<KillPoint, number>>;
  /**
   * How a second clean run differed from the first (empty for a deterministic job), as the outcome of a
   * scenario of one clean attempt.
   */
  rerun: ScenarioOutcome;
}

const cleanProfiles = new WeakMap<JobUnderTest, Promise<CleanProfile>>();

/**
 * @internal The job run cleanly twice (one attempt, no faults), once for every job object: the history
 * every scenario is held to, how often the job passes each kill point (which bounds where a scenario
 * kills it), and what differed on the second run. Refused: a job that fails with no fault at all, or
 * publishes nothing (nothing would be checked).
 */
export function cleanProfile(job: JobUnderTest): Promise<CleanProfile> {
  let profile = cleanProfiles.get(job);
  if (profile === undefined) {
    profile = profileOf(job);
    cleanProfiles.set(job, profile);
  }
  return profile;
}

/**
 * The job cannot be checked at all: it fails, or publishes nothing, in a clean run without any fault.
 * Thrown before any scenario runs, so there is nothing to replay; the message says what the clean run did.
 */
export class JobNotCheckableError extends Error {
  readonly code = 'job_not_checkable';
  constructor(message: string) {
    super(message);
    this.name = 'JobNotCheckableError';
  }
}

async function profileOf(job: JobUnderTest): Promise<CleanProfile> {
  const clean = async () => {
    const run = await execute(job, CLEAN, { trace: true });
    if (run.problems.length > 0) {
      throw new JobNotCheckableError(`the job does not run cleanly, with no fault at all:\n${[...describeAttempts(run.attempts), ...describeAnomalies(run.problems)].join('\n')}`);
    }
    return run;
  };
  const first = await clean();
  if (!first.history.events.some((event) => !isLifecycleAsset(event.asset))) {
    throw new JobNotCheckableError(
      `the job published no event in a clean run (producer ${job.producer}, assets ${job.assets.join(', ')}): there is nothing to check. ` +
        'Check that it publishes with the token and server in ONCEBOX_TOKEN and ONCEBOX_SERVER, as that producer, to those assets, ' +
        'and that it awaits box.close() before it exits (its relay delivers in the background)',
    );
  }
  const second = await clean();
  const hits = first.attempts[0]?.failpointHits ?? {};
  const reach = Object.fromEntries(Object.entries(FAILPOINT_OF).map(([point, failpoint]) => [point, hits[failpoint] ?? 0])) as Record<KillPoint, number>;
  return { history: first.history, reach, rerun: outcome(CLEAN, second.attempts, checkHistory(first.history, second.history)) };
}

async function execute(job: JobUnderTest, scenario: Scenario, options: { trace?: boolean } = {}): Promise<{ history: RunHistory; attempts: AttemptRecord[]; problems: Anomaly[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'oncebox-scenario-'));
  const postgres = job.postgres && { url: job.postgres.url, schema: `${job.postgres.schemaPrefix}_${Math.random().toString(36).slice(2, 10)}` };
  const server = await startTestServer({ assets: [...new Set([...job.assets, ...(job.consumes ?? [])])], postgres });
  try {
    const token = await server.publishToken(job.producer, { assets: [...job.assets], consumes: job.consumes ? [...job.consumes] : undefined });
    const extra = (await job.setup?.(server)) ?? {};
    server.faults.plan(...scenario.network);
    const runId = job.runId ?? DEFAULT_RUN_ID;
    // The job's data store exists before its first attempt, as a storage bucket or a mounted volume does.
    const data = join(dir, 'data');
    mkdirSync(data);
    const [executable, args] = await commandLine(job.command);
    const env = { ONCEBOX_LOG_LEVEL: 'warn', ...job.env, ...extra, ONCEBOX_SERVER: server.url, ONCEBOX_TOKEN: token, ONCEBOX_DATA: data, ONCEBOX_RUN_ID: runId };
    const run = new RunOfAttempts({ executable, args, env, dir, timeoutMs: job.attemptTimeoutMs ?? 60_000, trace: options.trace ?? false });
    for (const plan of attemptsOf(scenario)) await run.attempt(plan);
    // A run is retried until it succeeds: an attempt that ends by itself with a failure (its relay could not
    // deliver in time, behind a zombie that holds the file's lease) is what a scheduler retries.
    for (let retries = 0; run.lastFailed() && retries < MAX_RETRIES_AFTER_FAILURE; retries++) await run.attempt({ machine: 'same', end: { kind: 'completes' } });
    const { records, problems } = await run.end();
    const history = await historyOf(server, job, runId, data, run.outboxes);
    return { history, attempts: records, problems };
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The attempts of one run, one after another as the scenario says: each on its machine's outbox file, a
 * zombie stopped at its point and continued beside the next attempt or after it.
 */
class RunOfAttempts {
  readonly outboxes: string[] = [];
  private readonly records: AttemptRecord[] = [];
  private readonly problems: Anomaly[] = [];
  private readonly zombies: Promise<void>[] = [];
  /** A zombie stopped at its point, to continue as its plan says. */
  private zombie: { running: RunningAttempt; resume: 'with-next' | 'after-next' } | undefined;
  private last: AttemptRecord | undefined;
  private started = 0;

  constructor(private readonly options: { executable: string; args: string[]; env: Record<string, string>; dir: string; timeoutMs: number; trace: boolean }) {}

  async attempt(plan: AttemptPlan): Promise<void> {
    if (this.outboxes.length === 0 || plan.machine === 'fresh') this.outboxes.push(join(this.options.dir, `machine-${this.outboxes.length + 1}`, 'outbox.db'));
    const outbox = this.outboxes.at(-1)!;
    const attempt = ++this.started;
    const running = startAttempt({ ...this.options, trace: this.options.trace, env: { ...this.options.env, ONCEBOX_OUTBOX: outbox, ONCEBOX_ATTEMPT: String(attempt) }, attempt, outbox, end: plan.end });
    // A zombie of the attempt before goes on beside this one, or once this one has ended.
    const waiting = this.zombie;
    this.zombie = undefined;
    if (waiting?.resume === 'with-next') waiting.running.resume();
    if (plan.end.kind === 'zombie' && (await running.stopped)) {
      this.zombie = { running, resume: plan.end.resume };
      this.zombies.push(running.ended.then((record) => this.settle(record)));
    } else {
      this.last = await running.ended;
      this.settle(this.last);
    }
    waiting?.running.resume();
  }

  /** Whether the last attempt that ran to its end by itself ended in a failure. */
  lastFailed(): boolean {
    const last = this.last;
    return last !== undefined && last.planned === 'completes' && !last.timedOut && last.signal === null && last.exitCode !== 0;
  }

  /** Continues a zombie still stopped, waits for every attempt, and says what went wrong with them. */
  async end(): Promise<{ records: AttemptRecord[]; problems: Anomaly[] }> {
    this.zombie?.running.resume();
    await Promise.all(this.zombies);
    if (this.lastFailed()) {
      const last = this.last!;
      this.problems.push({ kind: 'failed', asset: 'attempt', partitionKey: String(last.attempt), detail: `the run never succeeded: retried ${MAX_RETRIES_AFTER_FAILURE} times, its last attempt, which nothing killed, exited ${last.exitCode}:\n${last.stderrTail}` });
    }
    return { records: this.records.sort((a, b) => a.attempt - b.attempt), problems: this.problems };
  }

  private settle(record: AttemptRecord): void {
    this.records.push(record);
    if (record.timedOut) this.problems.push({ kind: 'hung', asset: 'attempt', partitionKey: String(record.attempt), detail: `ran past ${this.options.timeoutMs} ms and was killed:\n${record.stderrTail}` });
  }
}

async function historyOf(server: TestServer, job: JobUnderTest, runId: string, data: string, outboxes: string[]): Promise<RunHistory> {
  const comparable = job.comparable ?? ((event) => event);
  const events = (await server.events({ producer: job.producer })).map(({ asset, partitionKey, partitionDate, extra, task }) => comparable({ asset, partitionKey, partitionDate, extra, task }));
  const stream = job.stream ?? { runId };
  const state = await server.streamState(job.producer, stream.runId, stream.task ?? null);
  const refused: RunHistory['refused'] = [];
  // The consumer's declared effects, in the one file its run used: none to compare when it declares none,
  // or when a fresh machine took over (the effects stayed on the lost one).
  let effects: string[] | undefined;
  for (const path of outboxes) {
    if (!existsSync(path)) continue;
    const file = new OutboxFile(path, 'normal', false);
    try {
      for (const row of new DeadLetters(file).list()) {
        if (row.code !== ProducerErrorCode.Fenced) refused.push({ asset: row.asset, partitionKey: row.partitionKey, code: row.code, reason: row.reason });
      }
      if (job.effects !== undefined && outboxes.length === 1) effects = effectsIn(file, job.effects);
    } finally {
      file.close();
    }
  }
  return { events, checkpoints: state?.checkpoints, data: snapshotDataStore(data, job.comparableData), refused, effects };
}

/** The rows `query` lists in `file`, each as canonical JSON: one per effect. */
function effectsIn(file: OutboxFile, query: string): string[] {
  try {
    return (file.db.prepare(query).all() as Record<string, unknown>[]).map((row) => canonicalJson(row, 'effect'));
  } catch (error) {
    throw new Error(`the job's effects query failed on ${file.path}: ${(error as Error).message} (effects: ${JSON.stringify(query)})`);
  }
}

function describeAttempts(attempts: readonly AttemptRecord[]): string[] {
  const told = new Map<string, number>();
  return attempts.flatMap((record) => {
    const how = record.timedOut ? 'hung, killed' : record.signal ? `ended by ${record.signal}` : `exited ${record.exitCode}`;
    const planned = record.planned === 'completes' ? '' : record.reachedPoint ? ` (${record.planned}, as planned)` : ` (${record.planned} planned, but it never got there)`;
    // An attempt that failed by itself says why, even when a retry then succeeded: the scheduler's retry
    // hides it, the report should not.
    const failedByItself = record.planned === 'completes' && !record.timedOut && record.exitCode !== 0 && record.exitCode !== null;
    const before = told.get(record.stderrTail);
    if (failedByItself && before === undefined) told.set(record.stderrTail, record.attempt);
    const why = !failedByItself || record.stderrTail === '' ? [] : before !== undefined ? [`      (the same error as attempt ${before})`] : record.stderrTail.split('\n').map((line) => `      ${line}`);
    return [`  attempt ${record.attempt} ${how}${planned}`, ...why];
  });
}

function outcome(scenario: Scenario, attempts: AttemptRecord[], anomalies: Anomaly[]): ScenarioOutcome {
  const ok = anomalies.length === 0;
  const report = [
    ok ? 'a clean history, through:' : `${anomalies.length} ${anomalies.length === 1 ? 'anomaly' : 'anomalies'}, through:`,
    ...describeScenario(scenario).map((line) => `  ${line}`),
    'what happened:',
    ...describeAttempts(attempts),
    ...(ok ? [] : ['anomalies:', ...describeAnomalies(anomalies).map((line) => `  ${line}`)]),
  ].join('\n');
  return { scenario, attempts, anomalies, ok, report };
}
