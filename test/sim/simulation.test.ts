import { afterAll, describe, expect, it } from 'vitest';
import { describeFailure, describeHappenings, runCampaign } from '../../sim/campaign.js';
import { closeSimAirflow } from '../../sim/forwarding.js';

/**
 * The whole-system simulation (sim/), at fixed seeds: several tenants, runs of one to three tasks in
 * shared and separate files, held emissions, ends with and without retries, zombies, consumer groups,
 * catalog readers, a lossy network, server restarts and restores, compaction, a forwarder into a real
 * Airflow, and users' mistakes fixed as printed, all in one world, checked after every operation by one checker. A failure prints its scenario and the
 * command that replays it; `npm run sim -- --seed S` shrinks it to the smallest that still fails.
 *
 * ONCEBOX_SIM_SEEDS (comma-separated) and ONCEBOX_SIM_RUNS override the fixed ones.
 */
const SEEDS = (process.env.ONCEBOX_SIM_SEEDS ?? '20261204,20261205,20261206,20261207').split(',').map(Number);
const RUNS = Number(process.env.ONCEBOX_SIM_RUNS ?? 12);

describe('the whole-system simulation', () => {
  // The Airflow the forwarding starts at its first use serves every seed of the file.
  afterAll(() => closeSimAirflow(), 60_000);
  for (const seed of SEEDS) {
    it(`holds every guarantee it checks over ${RUNS} scenarios of seed ${seed}`, async () => {
      console.log(`simulation: seed ${seed}, ${RUNS} runs (npm run sim -- --seed ${seed} --runs ${RUNS} to replay)`);
      const result = await runCampaign({ seed, runs: RUNS, shrink: false });
      if (result.failure) expect.fail(describeFailure(result));
      console.log(`simulation: seed ${seed}: ${result.totals.operations} operations, ${result.totals.faults} faults, ${result.totals.events} events`);
      console.log(describeHappenings(result.totals));
      expect(result.totals.events).toBeGreaterThan(0);
    }, 900_000);
  }
});
