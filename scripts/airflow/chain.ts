/**
 * The whole chain, for `npm run demo:airflow` and its test: the ingest DAG runs oncebox's Node.js job
 * with BashOperator (try 1 SIGKILLed mid-run, try 2 resuming on the same file in one DAG run and on a
 * fresh file in another), the forwarder carries the events into Airflow through a proxy that drops
 * answers after Airflow committed, and the partitioned DAG downstream gets its runs. A plain client posts
 * the same events through the same faults to a second asset, for comparison. Every count is read back
 * through Airflow's REST API.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AirflowClient } from '../../src/airflow/airflow-client.js';
import type { StoredEvent } from '../../src/protocol/wire.js';
import { allEvents } from '../events.js';
import { startFaultProxy, type Fault, type FaultProxy } from '../../src/testing/fault-proxy.js';
import { REPO, type RunningAirflow } from './harness.js';
import { postPlainly } from './plain-client.js';
import { seededRandom } from '../../test/support/seeded-random.js';

export interface ChainOptions {
  airflow: RunningAirflow;
  /** The oncebox server the ingest tasks deliver to (the Airflow workers have it as ONCEBOX_SERVER). */
  server: string;
  dir: string;
  batches: number;
  /** The share of posts whose answer the proxy drops after Airflow committed. */
  dropRate: number;
  seed: number;
  log: (line: string) => void;
}

export interface ChainResult {
  partitions: string[];
  /** Airflow asset events on the forwarded asset, per partition. */
  eventsPerPartition: Map<string, number>;
  /** Downstream DAG runs, per partition. */
  runsPerPartition: Map<string, number>;
  /** The ingest task's tries, per DAG run, with the run's state. */
  ingest: { runId: string; state: string; tries: number }[];
  forwarder: { posts: number; dropped: number; found: number };
  plain: { posts: number; dropped: number; eventsPerPartition: Map<string, number>; runsPerPartition: Map<string, number> };
}

const FORWARDED_ASSET = 'oncebox_batches';
const PLAIN_ASSET = 'plain_batches';

/** The first seed from `from` on whose first `count` draws `accept` says yes: a test's faults that surely happen. */
export function seedWhere(from: number, count: number, accept: (draws: number[]) => boolean): number {
  for (let seed = from; ; seed++) {
    if (accept(Array.from({ length: count }, seededRandom(seed)))) return seed;
  }
}

/** The first seed from `from` on whose draws drop at least `least` of the first `posts` answers at `rate`. */
export function seedDropping(from: number, posts: number, rate: number, least: number): number {
  return seedWhere(from, posts, (draws) => draws.filter((draw) => draw < rate).length >= least);
}

/** A proxy in front of Airflow that drops the answer to a share of the asset-event posts, after Airflow committed them. */
async function lossyProxy(airflowUrl: string, rate: number, seed: number): Promise<{ proxy: FaultProxy; counts: { posts: number; dropped: number } }> {
  const chance = seededRandom(seed);
  const counts = { posts: 0, dropped: 0 };
  const proxy = await startFaultProxy(airflowUrl, {
    choose: ({ method, url }): Fault | undefined => {
      if (method !== 'POST' || !url.startsWith('/api/v2/assets/events')) return undefined;
      counts.posts++;
      if (chance() >= rate) return undefined;
      counts.dropped++;
      return 'drop-response';
    },
  });
  return { proxy, counts };
}

export async function runChain(options: ChainOptions): Promise<ChainResult> {
  const { airflow, log } = options;
  const tag = `chain-${options.seed}`;
  const runs = [
    { runId: `${tag}-same-file`, prefix: `${tag}/same-file/`, freshFile: false },
    { runId: `${tag}-fresh-file`, prefix: `${tag}/fresh-file/`, freshFile: true },
  ];
  const partitions = runs.flatMap((run) => Array.from({ length: options.batches }, (_, i) => `${run.prefix}batch-${String(i + 1).padStart(4, '0')}`));

  const forwarding = await lossyProxy(airflow.url, options.dropRate, options.seed);
  const forwarder = startForwarder(options, forwarding.proxy.url);
  log(`forwarder: started, posting to Airflow through a proxy that drops ${Math.round(options.dropRate * 100)}% of the answers after Airflow committed`);

  const ingest: ChainResult['ingest'] = [];
  let events: StoredEvent[];
  try {
    for (const run of runs) {
      await airflow.admin.trigger('oncebox_ingest', run.runId, {
        batches: options.batches,
        partition_prefix: run.prefix,
        kill_on_try_1_before_batch: Math.ceil(options.batches / 2),
        fresh_file_on_retry: run.freshFile,
        pause_ms: 300,
      });
      log(`airflow: triggered oncebox_ingest run ${run.runId} (try 1 is SIGKILLed before batch ${Math.ceil(options.batches / 2)}; try 2 resumes on ${run.freshFile ? 'a fresh file' : 'the same file'})`);
    }
    for (const run of runs) {
      const finished = await airflow.admin.waitForRun('oncebox_ingest', run.runId, 300_000);
      const tries = Math.max(...(await airflow.admin.taskInstances('oncebox_ingest', run.runId)).map((ti) => ti.try_number));
      ingest.push({ runId: run.runId, state: finished.state, tries });
      log(`airflow: oncebox_ingest ${run.runId} ${finished.state} after ${tries} tries`);
    }

    events = (await allEvents(options.server, { asset: 'batch_ready' })).filter((event) => partitions.includes(event.partitionKey ?? ''));
    const last = Math.max(...events.map((event) => event.cursor));
    await forwarder.forwardedThrough(last, 120_000);
  } catch (error) {
    // Nothing is left running behind a failed chain: the forwarder child and the proxy go with it.
    forwarder.stop();
    await forwarding.proxy.close();
    throw error;
  }
  forwarder.stop();
  const forwarderStats = await forwarder.exited;
  log(`forwarder: forwarded ${events.length} events (${forwarderStats.found} found by a lookup after a lost answer); ${forwarding.counts.dropped} of ${forwarding.counts.posts} answers dropped`);

  // The control: the same events, the same faults, no lookup.
  const plainProxy = await lossyProxy(airflow.url, options.dropRate, options.seed);
  const plainClient = new AirflowClient({ url: plainProxy.proxy.url, credentials: { username: airflow.username, password: airflow.password } });
  await postPlainly(plainClient, await airflow.admin.assetId(PLAIN_ASSET), events);
  log(`plain client: posted the same ${events.length} events; ${plainProxy.counts.dropped} of ${plainProxy.counts.posts} answers dropped`);

  const eventsPerPartition = await perPartition(airflow, FORWARDED_ASSET, partitions);
  const plainEvents = await perPartition(airflow, PLAIN_ASSET, partitions);
  const runsPerPartition = await downstreamRuns(airflow, 'oncebox_partition_consumer', partitions);
  const plainRuns = await downstreamRuns(airflow, 'plain_partition_consumer', partitions);
  await forwarding.proxy.close();
  await plainProxy.proxy.close();
  return {
    partitions,
    eventsPerPartition,
    runsPerPartition,
    ingest,
    forwarder: { posts: forwarding.counts.posts, dropped: forwarding.counts.dropped, found: forwarderStats.found },
    plain: { ...plainProxy.counts, eventsPerPartition: plainEvents, runsPerPartition: plainRuns },
  };
}

/** Why the chain's result is wrong, or undefined when Airflow holds one event and one downstream run per partition. */
export function chainProblem(result: ChainResult): string | undefined {
  for (const run of result.ingest) {
    if (run.state !== 'success') return `the ingest run ${run.runId} ended ${run.state}`;
    if (run.tries < 2) return `the ingest run ${run.runId} was not retried (${run.tries} try): try 1 was to be killed`;
  }
  for (const partition of result.partitions) {
    const events = result.eventsPerPartition.get(partition) ?? 0;
    if (events !== 1) return `Airflow holds ${events} asset events for partition ${partition}, expected exactly 1`;
    const runs = result.runsPerPartition.get(partition) ?? 0;
    if (runs !== 1) return `Airflow has ${runs} downstream runs for partition ${partition}, expected exactly 1`;
  }
  const extra = [...result.eventsPerPartition.keys()].filter((partition) => !result.partitions.includes(partition));
  if (extra.length > 0) return `Airflow holds events for partitions no batch has: ${extra.join(', ')}`;
  return undefined;
}

export function duplicates(perPartition: Map<string, number>): number {
  return [...perPartition.values()].reduce((sum, count) => sum + Math.max(0, count - 1), 0);
}

async function perPartition(airflow: RunningAirflow, asset: string, partitions: string[]): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  const prefixes = new Set(partitions.map((partition) => partition.slice(0, partition.lastIndexOf('/') + 1)));
  for (const event of await airflow.admin.assetEvents(await airflow.admin.assetId(asset))) {
    const partition = event.partition_key ?? '';
    if (![...prefixes].some((prefix) => partition.startsWith(prefix))) continue;
    counts.set(partition, (counts.get(partition) ?? 0) + 1);
  }
  return counts;
}

/** Waits until every partition has a downstream run, and a little longer for any duplicate's run to show; counts them. */
async function downstreamRuns(airflow: RunningAirflow, dagId: string, partitions: string[]): Promise<Map<string, number>> {
  const read = async () => {
    const counts = new Map<string, number>();
    for (const run of await airflow.admin.dagRuns(dagId)) {
      if (run.partition_key && partitions.includes(run.partition_key)) counts.set(run.partition_key, (counts.get(run.partition_key) ?? 0) + 1);
    }
    return counts;
  };
  await airflow.admin.until(`a ${dagId} run for each partition`, read, (counts) => counts.size === partitions.length, 180_000);
  await sleep(5000);
  return read();
}

/** `oncebox forward airflow` as a child process, with its output lines counted. */
function startForwarder(options: ChainOptions, airflowUrl: string) {
  const map = join(options.dir, 'airflow-map.json');
  writeFileSync(map, JSON.stringify({ batch_ready: { name: FORWARDED_ASSET } }));
  const args = ['forward', 'airflow', '--server', options.server, '--airflow', airflowUrl, '--map', map, '--db', join(options.dir, 'forwarder.db'), '--settle-ms', '200'];
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    cwd: REPO,
    env: { ...process.env, ONCEBOX_AIRFLOW_USERNAME: options.airflow.username, ONCEBOX_AIRFLOW_PASSWORD: options.airflow.password },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let cursor = 0;
  let found = 0;
  let stderr = '';
  let buffered = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      const line = JSON.parse(buffered.slice(0, nl)) as { event: string; cursor?: number; foundByLookup?: boolean };
      buffered = buffered.slice(nl + 1);
      if (line.event !== 'forwarded') continue;
      cursor = Math.max(cursor, line.cursor ?? 0);
      if (line.foundByLookup) found++;
    }
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<{ found: number }>((resolve, reject) =>
    child.on('close', (code) => (code === 0 ? resolve({ found }) : reject(new Error(`the forwarder exited with ${code}: ${stderr}`)))),
  );
  exited.catch(() => undefined);
  return {
    exited,
    stop: () => child.kill('SIGTERM'),
    async forwardedThrough(target: number, timeoutMs: number): Promise<void> {
      const deadline = Date.now() + timeoutMs;
      while (cursor < target) {
        if (child.exitCode !== null) await exited;
        if (Date.now() > deadline) throw new Error(`the forwarder reached cursor ${cursor}, not ${target}, in ${timeoutMs} ms: ${stderr}`);
        await sleep(200);
      }
    },
  };
}
