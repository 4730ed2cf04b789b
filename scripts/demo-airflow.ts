/**
 * `npm run demo:airflow`: oncebox's promise carried into a real Apache Airflow 3.
 *
 * Installs Airflow into .airflow/venv if it is missing, starts it (API server, scheduler, DAG processor
 * on a PostgreSQL database of its own), an oncebox server and the forwarder, then runs the chain of
 * scripts/airflow/chain.ts: two ingest DAG runs whose try 1 is SIGKILLed mid-run and whose try 2 resumes
 * (on the same file, and on a fresh one), the forwarder posting through a proxy that drops answers after
 * Airflow committed, and the partitioned DAG downstream. It ends with one line, `verdict: ok (...)`, only
 * when Airflow holds exactly one asset event and one downstream run per batch partition.
 *
 *   npm run demo:airflow [-- --batches 6] [--drop-rate 0.3] [--seed N]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createServer } from '../src/dedupe/server.js';
import { chainProblem, duplicates, runChain } from './airflow/chain.js';
import { airflowInstalled, installAirflow, REPO, startAirflow } from './airflow/harness.js';

const { values: args } = parseArgs({
  options: {
    batches: { type: 'string', default: '6' },
    'drop-rate': { type: 'string', default: '0.3' },
    seed: { type: 'string' },
    keep: { type: 'boolean', default: false },
  },
  strict: true,
});
const seed = Number(args.seed ?? Date.now() % 1_000_000);
const log = (line: string) => console.log(line);

if (!airflowInstalled()) {
  log('demo: Airflow is not installed yet; installing it (once)');
  await installAirflow();
}
const dir = mkdtempSync(join(tmpdir(), 'oncebox-demo-airflow-'));
const server = await createServer({ db: join(dir, 'server.db'), assets: ['batch_ready'], logger: { level: 'warn' } });
const serverUrl = await server.listen({ port: 0, host: '127.0.0.1' });
log(`oncebox: server at ${serverUrl}`);
log('airflow: starting (API server, scheduler, DAG processor)');
const airflow = await startAirflow({
  name: 'demo',
  dir,
  taskEnv: { ONCEBOX_ROOT: REPO, ONCEBOX_SERVER: serverUrl, ONCEBOX_DATA: join(dir, 'ingest'), ONCEBOX_NODE: process.execPath },
});
log(`airflow: up at ${airflow.url} (user ${airflow.username}); seed ${seed}`);

let code = 1;
try {
  const result = await runChain({ airflow, server: serverUrl, dir, batches: Number(args.batches), dropRate: Number(args['drop-rate']), seed, log });
  const plainDuplicateRuns = duplicates(result.plain.runsPerPartition);
  log(
    `plain client (same posts, same faults, no lookup): ${[...result.plain.eventsPerPartition.values()].reduce((a, b) => a + b, 0)} asset events and ` +
      `${[...result.plain.runsPerPartition.values()].reduce((a, b) => a + b, 0)} downstream runs for ${result.partitions.length} partitions: ` +
      `${plainDuplicateRuns} duplicate runs`,
  );
  const problem = chainProblem(result);
  const partitions = result.partitions.length;
  if (problem === undefined) {
    log(
      `verdict: ok (${partitions} batch partitions, ${partitions} Airflow asset events, ${partitions} downstream runs; ` +
        `ingest tries ${result.ingest.map((run) => run.tries).join('+')}; ${result.forwarder.dropped} of ${result.forwarder.posts} answers dropped, ` +
        `${result.forwarder.found} events found by lookup; plain client: ${plainDuplicateRuns} duplicate runs)`,
    );
    code = 0;
  } else {
    log(`verdict: FAILED (${problem}; seed ${seed})`);
  }
} catch (error) {
  log(`verdict: FAILED (${(error as Error).message}; seed ${seed}; Airflow logs in ${airflow.home})`);
  args.keep = true;
} finally {
  await airflow.stop();
  await server.close();
  if (!args.keep) rmSync(dir, { recursive: true, force: true });
}
process.exit(code);
