import { afterAll } from 'vitest';
import { airflowInstalled, startAirflow, type AirflowOptions, type RunningAirflow } from '../../scripts/airflow/harness.js';

const installed = airflowInstalled();
if (!installed && process.env.CI === 'true') {
  throw new Error('Apache Airflow is required under CI=true, but .airflow/venv has none: run airflow/install.sh (.ci/run does)');
}
if (!installed) console.warn('Airflow tests skipped: Airflow is not installed in .airflow/venv; run airflow/install.sh');

/** Whether the Airflow tests run here; outside CI they skip, and say why, when Airflow is not installed. */
export const airflowAvailable = installed;
export const airflowSkipReason = installed ? '' : ' (skipped: Airflow not installed; run airflow/install.sh)';

const running: RunningAirflow[] = [];

/** A real Airflow for this test file, stopped when the file ends. */
export async function airflowForTests(options: AirflowOptions): Promise<RunningAirflow> {
  const airflow = await startAirflow(options);
  running.push(airflow);
  return airflow;
}

/**
 * Stops this file's Airflows; idempotent. A file that removes Airflow's folder calls it first: hooks run
 * in reverse order, so this module's own afterAll would stop Airflow only after the folder was removed
 * under it (ENOTEMPTY while Airflow still wrote its logs).
 */
export async function stopAirflowsForTests(): Promise<void> {
  for (const airflow of running.splice(0)) await airflow.stop();
}

afterAll(stopAirflowsForTests);
