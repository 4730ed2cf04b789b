import fc from 'fast-check';
import { z } from 'zod';
import type { JobUnderTest } from './job.js';
import { cleanProfile, runScenario, type ScenarioOutcome } from './run-scenario.js';
import { FAILPOINT_OF, scenarioArbitrary, singleKills, type AttemptEnd, type CommitError, type KillPoint, type Scenario, type ScenarioOptions } from './scenario.js';

/** What `checkJob` takes. */
export interface CheckJobOptions extends ScenarioOptions {
  /** Random scenarios to run, after the single kills. @defaultValue 50 */
  runs?: number | undefined;
  /**
   * The campaign's seed. ONCEBOX_TESTING_SEED wins over it, so that a failure replays without an edit.
   * @defaultValue ONCEBOX_TESTING_SEED, else this, else a new one (printed)
   */
  seed?: number | undefined;
  /**
   * Where in the campaign to start: the path of a failure, to replay only it (with its seed, which must
   * be given too). @defaultValue ONCEBOX_TESTING_PATH, else from the start
   */
  path?: string | undefined;
  /**
   * Run every single kill first (each kill point the job reaches, the first and the last time it does,
   * retried on the same machine and on a fresh one), then the random scenarios. @defaultValue true
   */
  singleKills?: boolean | undefined;
  /** Where the campaign says its seed and progress. @defaultValue console.log */
  log?: ((line: string) => void) | undefined;
  /** Scenarios of your own, instead of `scenarioArbitrary(options)`. */
  scenarios?: fc.Arbitrary<Scenario> | undefined;
}

/** What a passing campaign ran. */
export interface CampaignResult {
  /** Random scenarios run. */
  runs: number;
  /** Single kills run before them. */
  singleKills: number;
  seed: number;
  durationMs: number;
}

/**
 * A failed campaign: the smallest scenario it found that breaks the job, what it showed, and how to run
 * it again (`replay`: the variables to set before running the test again). `message` says all of it for
 * a person.
 */
export class JobCheckError extends Error {
  readonly code = 'job_check_failed';
  constructor(
    readonly outcome: ScenarioOutcome,
    readonly seed: number,
    /** fast-check's path to the shrunk scenario; empty for a single kill. */
    readonly path: string,
    /** Where the failure was found: the two clean runs, `single kill 3 of 16 (after-commit@1/fresh)`, `random scenario 7`. */
    readonly foundIn: string,
    /** How many times fast-check shrank it (0 for a single kill, which is as small as scenarios get). */
    readonly shrinks: number,
    readonly replay: string,
  ) {
    super(
      `the job broke its promise in ${foundIn} of the campaign (seed ${seed})${shrinks > 0 ? `, shrunk ${shrinks} times` : ''}:\n${outcome.report}\n` +
        `replay just this scenario: ${replay} (then run this test again)`,
    );
    this.name = 'JobCheckError';
  }
}

/**
 * Runs the job cleanly (twice: its history must not change by itself), then killed at every point it
 * reaches with a retry on the same and on a fresh machine, then through `runs` random failure scenarios
 * (kills, retries, zombies beside their retry, network faults), each on a fresh test server, and checks
 * each history against the clean run. A failing random scenario is shrunk by fast-check to the smallest
 * that still fails. A failure throws a JobCheckError that shows the scenario and says how to replay it.
 * Works from any test runner: it resolves or throws.
 */
export async function checkJob(job: JobUnderTest, options: CheckJobOptions = {}): Promise<CampaignResult> {
  const given = seedFromEnvironment() ?? options.seed;
  const path = nonEmpty(process.env.ONCEBOX_TESTING_PATH) ?? options.path;
  if (path !== undefined && given === undefined) {
    throw new TypeError(`oncebox/testing: a path (${path}) replays a scenario of one campaign, and needs that campaign's seed: set ONCEBOX_TESTING_SEED too`);
  }
  // Replay variables are read before any run: a mistake in them is said at once.
  const single = singleKillFromEnvironment();
  const written = scenarioFromEnvironment();
  if ([single, path, written].filter((replay) => replay !== undefined).length > 1) {
    throw new TypeError('oncebox/testing: ONCEBOX_TESTING_SINGLE_KILL, ONCEBOX_TESTING_SCENARIO and ONCEBOX_TESTING_PATH each replay one scenario: set one of them');
  }
  const seed = given ?? Math.floor(Math.random() * 2 ** 31);
  const runs = options.runs ?? 50;
  const log = options.log ?? ((line: string) => console.log(line));
  const started = Date.now();
  const { reach, rerun } = await cleanProfile(job);
  refuseNondeterminism(rerun, seed);
  const scenarioOptions = { ...options, reach: options.reach ?? reach };

  if (single !== undefined) {
    log(`oncebox/testing: replaying the single kill ${singleKillName(single)}`);
    const outcome = await runScenario(job, single);
    if (!outcome.ok) throw new JobCheckError(outcome, seed, '', `the single kill ${singleKillName(single)}`, 0, `ONCEBOX_TESTING_SINGLE_KILL=${singleKillName(single)}`);
    throw replayPassed('ONCEBOX_TESTING_SINGLE_KILL', outcome);
  }
  if (written !== undefined) {
    log('oncebox/testing: replaying the scenario of ONCEBOX_TESTING_SCENARIO');
    const outcome = await runScenario(job, written);
    if (!outcome.ok) throw new JobCheckError(outcome, seed, '', 'the replayed scenario', 0, scenarioReplay(written));
    throw replayPassed('ONCEBOX_TESTING_SCENARIO', outcome);
  }

  const sweep = path === undefined && options.singleKills !== false && options.scenarios === undefined ? singleKills(scenarioOptions) : [];
  log(
    `oncebox/testing: ${path === undefined ? `${sweep.length} single kills, then ${runs} random scenarios` : `replaying path ${path}`}, ` +
      `seed ${seed} (ONCEBOX_TESTING_SEED=${seed} runs them again)`,
  );
  for (const [index, scenario] of sweep.entries()) {
    const outcome = await runScenario(job, scenario);
    const name = singleKillName(scenario);
    if (!outcome.ok) throw new JobCheckError(outcome, seed, '', `single kill ${index + 1} of ${sweep.length} (${name})`, 0, `ONCEBOX_TESTING_SINGLE_KILL=${name}`);
  }

  let failed: ScenarioOutcome | undefined;
  const details = await fc.check(
    fc.asyncProperty(options.scenarios ?? scenarioArbitrary(scenarioOptions), async (scenario) => {
      const outcome = await runScenario(job, scenario);
      // Each failure found while shrinking is smaller than the last: the last one is the one to show.
      if (!outcome.ok) failed = outcome;
      return outcome.ok;
    }),
    { seed, numRuns: runs, ...(path === undefined ? {} : { path }) },
  );
  if (details.failed && failed !== undefined) {
    const counterexample = details.counterexamplePath ?? '';
    const foundIn = path === undefined ? `random scenario ${details.numRuns}` : `the replay of path ${path}`;
    // The scenario itself, not its seed and path: what a seed draws depends on how often the clean run
    // passed each point, which may differ from one run of the test to the next (a relay's requests).
    throw new JobCheckError(failed, seed, counterexample, foundIn, details.numShrinks, scenarioReplay(failed.scenario));
  }
  if (details.failed) throw details.errorInstance ?? new Error(`the campaign failed (seed ${seed}) without a scenario to show`);
  if (path !== undefined) throw replayPassed('ONCEBOX_TESTING_PATH', undefined);
  return { runs: details.numRuns, singleKills: sweep.length, seed, durationMs: Date.now() - started };
}

/**
 * Two clean runs that differ: an event that changed is the job's own bug (a retry would publish it
 * otherwise, and the server refuse it), found before any fault; a data file that changed may be harmless
 * (a timestamp in a report), and the job's author must say so with `comparableData`.
 */
function refuseNondeterminism(rerun: ScenarioOutcome, seed: number): void {
  if (rerun.ok) return;
  if (rerun.anomalies.some((anomaly) => anomaly.asset !== 'data')) {
    throw new JobCheckError(rerun, seed, '', 'two clean runs, with no fault at all,', 0, 'nothing to set: the clean runs come first in every campaign');
  }
  throw new Error(
    `oncebox/testing: two clean runs of the job, with no fault at all, left different data, so no scenario can be judged against one:\n${rerun.report}\n` +
      'Make its data writes deterministic, or map what differs by nature (a timestamp) out with the job\'s `comparableData`',
  );
}

/**
 * A replay that passes fails all the same: it ran one scenario, not the campaign, and a replay variable
 * left set (in a CI job's environment) must not turn a wrong job green.
 */
function replayPassed(variable: string, outcome: ScenarioOutcome | undefined): Error {
  return new Error(
    `oncebox/testing: the replayed scenario passed now${outcome ? `:\n${outcome.report}` : ''}\n` +
      `${variable} replays one scenario and is never a campaign: unset it to run the whole campaign again`,
  );
}

/**
 * A single kill as ONCEBOX_TESTING_SINGLE_KILL names it: `before-commit@1/fresh`, the same on any machine;
 * a commit error as `commit-fails:SQLITE_FULL@1/same`.
 */
function singleKillName(scenario: Scenario): string {
  const [killed, retry] = scenario.attempts;
  if (retry === undefined) throw new Error('not a single kill');
  if (killed?.end.kind === 'commit-fails') return `commit-fails:${killed.end.error}@${killed.end.hit}/${retry.machine}`;
  if (killed?.end.kind !== 'killed') throw new Error('not a single kill');
  return `${killed.end.at}@${killed.end.hit}/${retry.machine}`;
}

/** ONCEBOX_TESTING_SINGLE_KILL, as the scenario it names. */
function singleKillFromEnvironment(): Scenario | undefined {
  const text = nonEmpty(process.env.ONCEBOX_TESTING_SINGLE_KILL);
  if (text === undefined) return undefined;
  const match = /^(?:commit-fails:(SQLITE_FULL|SQLITE_BUSY)|([a-z-]+))@(\d+)\/(same|fresh)$/.exec(text);
  const error = match?.[1] as CommitError | undefined;
  const at = match?.[2] as KillPoint | undefined;
  if (!match || (error === undefined && (!at || !(at in FAILPOINT_OF))) || Number(match[3]) < 1) {
    throw new TypeError(
      `oncebox/testing: ONCEBOX_TESTING_SINGLE_KILL names a single kill as a failure's message gives it (such as before-commit@1/fresh, or commit-fails:SQLITE_FULL@1/same), not ${JSON.stringify(text)}`,
    );
  }
  const hit = Number(match[3]);
  const first: AttemptEnd = error === undefined ? { kind: 'killed', at: at!, hit } : { kind: 'commit-fails', hit, error };
  return { attempts: [{ machine: 'same', end: first }, { machine: match[4] as 'same' | 'fresh', end: { kind: 'completes' } }], network: [] };
}

/** A scenario as ONCEBOX_TESTING_SCENARIO carries it, quoted for a shell. */
function scenarioReplay(scenario: Scenario): string {
  return `ONCEBOX_TESTING_SCENARIO='${JSON.stringify(scenario)}'`;
}

const killPointSchema = z.enum(Object.keys(FAILPOINT_OF) as [KillPoint, ...KillPoint[]]);
const hitSchema = z.number().int().min(1);
const scenarioSchema: z.ZodType<Scenario> = z.strictObject({
  attempts: z
    .array(
      z.strictObject({
        machine: z.enum(['same', 'fresh']),
        end: z.discriminatedUnion('kind', [
          z.strictObject({ kind: z.literal('completes') }),
          z.strictObject({ kind: z.literal('killed'), at: killPointSchema, hit: hitSchema }),
          z.strictObject({ kind: z.literal('killed-after'), ms: z.number().int().min(0) }),
          z.strictObject({ kind: z.literal('zombie'), at: killPointSchema, hit: hitSchema, resume: z.enum(['with-next', 'after-next']) }),
          z.strictObject({ kind: z.literal('commit-fails'), hit: hitSchema, error: z.enum(['SQLITE_FULL', 'SQLITE_BUSY']) }),
        ]),
      }),
    )
    .min(1),
  network: z.array(z.enum(['forward', 'drop-request', 'drop-response', 'duplicate', 'delay', 'fail-503', 'hold'])),
});

/** ONCEBOX_TESTING_SCENARIO, as the scenario a failure's message wrote. */
function scenarioFromEnvironment(): Scenario | undefined {
  const text = nonEmpty(process.env.ONCEBOX_TESTING_SCENARIO);
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  const parsed = scenarioSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new TypeError(
      `oncebox/testing: ONCEBOX_TESTING_SCENARIO is a scenario as a failure's message writes it (JSON: {"attempts":[…],"network":[…]}); ` +
        `${value === undefined ? 'this is not JSON' : `${issue?.path.join('.') || 'it'}: ${issue?.message}`}`,
    );
  }
  return parsed.data;
}

function nonEmpty(text: string | undefined): string | undefined {
  return text === undefined || text.trim() === '' ? undefined : text.trim();
}

/** ONCEBOX_TESTING_SEED, when set; anything but a whole number is a mistake to say, not to ignore. */
function seedFromEnvironment(): number | undefined {
  const text = nonEmpty(process.env.ONCEBOX_TESTING_SEED);
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isSafeInteger(value)) throw new TypeError(`oncebox/testing: ONCEBOX_TESTING_SEED must be a whole number (a failure's message gives one), not ${JSON.stringify(text)}`);
  return value;
}
