/**
 * npm run sim -- [--seed S] [--runs N | --minutes M] [--path P]
 *
 * Runs the whole-system simulation: N scenarios from seed S (printed either way), or seed after seed
 * until M minutes have passed. A failure prints the smallest scenario that still fails and the command
 * that replays it (its seed and --path); the exit status is 1 then.
 */
import { Command, InvalidArgumentError } from 'commander';
import { describeFailure, describeHappenings, runCampaign } from './campaign.js';
import { closeSimAirflow } from './forwarding.js';
import { addReport, emptyReport } from './simulation.js';

const whole = (flag: string) => (value: string) => {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError(`${flag} must be a whole number (got "${value}")`);
  return Number(value);
};

const program = new Command('sim')
  .description('the whole-system simulation: seeded scenarios of every feature, faults and mistakes, one checker')
  .option('--seed <n>', 'the first seed (printed; pass it back to replay)', whole('--seed'), Date.now() % 2 ** 31)
  .option('--runs <n>', 'scenarios per seed', whole('--runs'), 20)
  .option('--minutes <n>', 'run seed after seed (seed, seed + 1, …) for this long', whole('--minutes'))
  .option('--path <path>', "replay one shrunk case of the seed, as a failure printed it")
  .parse();
const options = program.opts<{ seed: number; runs: number; minutes?: number; path?: string }>();

const until = options.minutes === undefined ? undefined : Date.now() + options.minutes * 60_000;
const started = Date.now();
let seeds = 0;
let runs = 0;
const totals = emptyReport();
for (let seed = options.seed; ; seed++) {
  console.log(`simulation: seed ${seed}, ${options.path === undefined ? `${options.runs} runs` : `replaying path ${options.path}`}`);
  const result = await runCampaign({ seed, runs: options.runs, path: options.path });
  seeds++;
  runs += result.executed;
  addReport(totals, result.totals);
  if (result.failure) {
    console.error(describeFailure(result));
    await closeSimAirflow();
    process.exit(1);
  }
  if (until === undefined || Date.now() >= until || options.path !== undefined) break;
}
const minutes = (Date.now() - started) / 60_000;
console.log(
  `simulation: ${seeds} seeds, ${runs} runs passed; ${totals.operations} operations (${Math.round(totals.operations / minutes)} a minute), ` +
    `${(totals.faults / runs).toFixed(1)} faults a run, ${totals.events} events stored, in ${minutes.toFixed(1)} min`,
);
console.log(describeHappenings(totals));
// The Airflow the forwarding started serves every seed: it goes at the end.
await closeSimAirflow();
