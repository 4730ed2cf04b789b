import fc from 'fast-check';
import { closeConsoleBrowser } from './console-reading.js';
import { scenarioArbitrary, type Scenario } from './operations.js';
import { addReport, emptyReport, simulate, type SimulationReport } from './simulation.js';

/** The longest operation list a scenario draws: long enough for faults to meet, short enough to shrink. */
export const MAX_OPERATIONS = 40;

export interface CampaignOptions {
  seed: number;
  runs: number;
  /** Replays only the case at this path of the seed's runs (as a failure printed it). */
  path?: string | undefined;
  maxOperations?: number | undefined;
  /** Shrink a failure to the smallest scenario that still fails (minutes), or report the failing case as drawn. */
  shrink?: boolean | undefined;
}

export interface CampaignResult {
  seed: number;
  runs: number;
  /** Scenarios simulated, shrinking's included: for the figures. */
  executed: number;
  /** Whether a failure was shrunk. */
  shrunk: boolean;
  /** Whether one case was replayed by its path. */
  replayed: boolean;
  totals: SimulationReport;
  /** The smallest failing scenario found and what broke, with the command that replays it. */
  failure?: { scenario: Scenario; message: string; replay: string; path: string } | undefined;
}

/**
 * Runs `runs` scenarios drawn from `seed`; on a failure fast-check shrinks it to the smallest scenario
 * that still fails, and the result names it and the one command that replays exactly that case.
 */
export async function runCampaign(options: CampaignOptions): Promise<CampaignResult> {
  const totals = emptyReport();
  let runs = 0;
  const property = fc.asyncProperty(scenarioArbitrary(options.maxOperations ?? MAX_OPERATIONS), async (scenario) => {
    const report = await simulate(scenario);
    runs++;
    addReport(totals, report);
  });
  const details = await fc
    .check(property, {
      seed: options.seed,
      numRuns: options.runs,
      endOnFailure: options.shrink === false,
      ...(options.path === undefined ? {} : { path: options.path }),
    })
    // The console's browser serves every scenario of the campaign: it goes with the campaign.
    .finally(() => closeConsoleBrowser());
  if (!details.failed) return { seed: options.seed, runs: options.runs, executed: runs, shrunk: false, replayed: options.path !== undefined, totals };
  const [scenario] = details.counterexample!;
  const path = details.counterexamplePath!;
  return {
    seed: options.seed,
    runs: options.runs,
    executed: runs,
    shrunk: options.shrink !== false && options.path === undefined,
    replayed: options.path !== undefined,
    totals,
    failure: {
      scenario,
      path,
      message: details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance),
      replay: `npm run sim -- --seed ${options.seed} --runs ${options.runs} --path ${path}`,
    },
  };
}

/** A failure as a user reads it: what broke, the smallest scenario (one operation a line), and the replay. */
export function describeFailure(result: CampaignResult): string {
  const failure = result.failure!;
  return [
    `simulation seed ${result.seed} failed: ${failure.message}`,
    `${result.shrunk ? 'smallest scenario' : result.replayed ? 'the replayed scenario' : 'failing scenario (not shrunk)'}: ${JSON.stringify(failure.scenario.layout)}`,
    ...failure.scenario.operations.map((operation, i) => `  ${i}: ${JSON.stringify(operation)}`),
    `replay: ${failure.replay}`,
    ...(result.shrunk || result.replayed ? [] : [`shrink: npm run sim -- --seed ${result.seed} --runs ${result.runs}`]),
  ].join('\n');
}

/** What the faults and mistakes of a campaign came to, one count a line: evidence that each path was taken. */
export function describeHappenings(totals: SimulationReport): string {
  const lines = Object.entries(totals.happened)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([what, count]) => `  ${what}: ${count}`);
  return lines.length === 0 ? 'simulation: nothing of note happened' : `simulation: what happened\n${lines.join('\n')}`;
}
