import fc from 'fast-check';
import type { JobUnderTest } from './job.js';
import { runScenario, type ScenarioOutcome } from './run-scenario.js';
import { scenarioArbitrary, type Scenario, type ScenarioOptions } from './scenario.js';

/** What `checkJob` takes. */
export interface CheckJobOptions extends ScenarioOptions {
  /** Scenarios to run. @defaultValue 50 */
  runs?: number | undefined;
  /** The campaign's seed. @defaultValue ONCEBOX_TESTING_SEED, else a new one (printed) */
  seed?: number | undefined;
  /**
   * Where in the campaign to start: the path of a failure, to replay only it (with its seed).
   * @defaultValue ONCEBOX_TESTING_PATH, else from the start
   */
  path?: string | undefined;
  /** Where the campaign says its seed and progress. @defaultValue console.log */
  log?: ((line: string) => void) | undefined;
  /** Scenarios of your own, instead of `scenarioArbitrary(options)`. */
  scenarios?: fc.Arbitrary<Scenario> | undefined;
}

/** What a passing campaign ran. */
export interface CampaignResult {
  runs: number;
  seed: number;
  durationMs: number;
}

/**
 * A failed campaign: the smallest scenario fast-check shrank the failure to, what it showed, and how to
 * run it again. `message` says all of it for a person.
 */
export class JobCheckError extends Error {
  readonly code = 'job_check_failed';
  constructor(
    readonly outcome: ScenarioOutcome,
    readonly seed: number,
    readonly path: string,
    readonly runsBeforeFailure: number,
    readonly shrinks: number,
  ) {
    super(
      `the job broke its promise in scenario ${runsBeforeFailure} of the campaign (seed ${seed}), ` +
        `shrunk ${shrinks} times to:\n${outcome.report}\n` +
        `replay just this scenario: ONCEBOX_TESTING_SEED=${seed} ONCEBOX_TESTING_PATH=${path} (then run this test again)`,
    );
    this.name = 'JobCheckError';
  }
}

/**
 * Runs the job through `runs` random failure scenarios (kills at every point that matters, retries on
 * the same machine and on a fresh one, zombies beside their retry, network faults), each on a fresh test
 * server, and checks each history against a clean run. On the first failure, fast-check shrinks it to
 * the smallest scenario that still fails, and this throws a JobCheckError that shows it and says how to
 * replay it. Works from any test runner: it resolves or throws.
 */
export async function checkJob(job: JobUnderTest, options: CheckJobOptions = {}): Promise<CampaignResult> {
  const seed = options.seed ?? numberFrom(process.env.ONCEBOX_TESTING_SEED) ?? Math.floor(Math.random() * 2 ** 31);
  const path = options.path ?? process.env.ONCEBOX_TESTING_PATH;
  const runs = options.runs ?? 50;
  const log = options.log ?? ((line: string) => console.log(line));
  log(`oncebox/testing: ${path === undefined ? `${runs} scenarios` : `replaying path ${path}`}, seed ${seed} (ONCEBOX_TESTING_SEED=${seed} runs them again)`);
  const started = Date.now();
  let failed: ScenarioOutcome | undefined;
  const details = await fc.check(
    fc.asyncProperty(options.scenarios ?? scenarioArbitrary(options), async (scenario) => {
      const outcome = await runScenario(job, scenario);
      // Each failure found while shrinking is smaller than the last: the last one is the one to show.
      if (!outcome.ok) failed = outcome;
      return outcome.ok;
    }),
    { seed, numRuns: runs, ...(path === undefined ? {} : { path }) },
  );
  if (details.failed && failed !== undefined) {
    throw new JobCheckError(failed, seed, details.counterexamplePath ?? '', details.numRuns, details.numShrinks);
  }
  if (details.failed) throw details.errorInstance ?? new Error(`the campaign failed (seed ${seed}) without a scenario to show`);
  return { runs: details.numRuns, seed, durationMs: Date.now() - started };
}

function numberFrom(text: string | undefined): number | undefined {
  if (text === undefined || text === '') return undefined;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : undefined;
}
