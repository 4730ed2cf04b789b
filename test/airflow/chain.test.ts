import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chainProblem, runChain, seedDropping } from '../../scripts/airflow/chain.js';
import { REPO, type RunningAirflow } from '../../scripts/airflow/harness.js';
import { createServer, type OnceboxServer } from '../../src/dedupe/index.js';
import { airflowAvailable, airflowForTests, stopAirflowsForTests, airflowSkipReason } from '../support/airflow.js';

let airflow: RunningAirflow;
let server: OnceboxServer;
let serverUrl: string;
let dir: string;

beforeAll(async () => {
  if (!airflowAvailable) return;
  dir = mkdtempSync(join(tmpdir(), 'oncebox-airflow-chain-'));
  server = await createServer({ db: join(dir, 'server.db'), assets: ['batch_ready'] });
  serverUrl = await server.listen({ port: 0, host: '127.0.0.1' });
  airflow = await airflowForTests({
    name: `chain_${process.pid}`,
    dir,
    taskEnv: { ONCEBOX_ROOT: REPO, ONCEBOX_SERVER: serverUrl, ONCEBOX_DATA: join(dir, 'ingest'), ONCEBOX_NODE: process.execPath },
  });
}, 240_000);

afterAll(async () => {
  await stopAirflowsForTests();
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
});

describe.skipIf(!airflowAvailable)(`the chain from an Airflow task to a partitioned DAG downstream${airflowSkipReason}`, () => {
  it('gives one asset event and one downstream run per batch partition through killed tries, a fresh file and lost answers', { timeout: 600_000 }, async () => {
    // A seed whose faults drop at least two of the first eight answers, on both sides.
    const seed = Number(process.env.ONCEBOX_SEED ?? seedDropping(Date.now() % 1_000_000, 8, 0.3, 2));
    const result = await runChain({ airflow, server: serverUrl, dir, batches: 4, dropRate: 0.3, seed, log: () => {} });
    const context = `seed ${seed} (set ONCEBOX_SEED to replay)`;

    expect(chainProblem(result), context).toBeUndefined();
    // Read back through Airflow's REST API: one event and one run for each of the 8 partitions.
    expect(result.partitions).toHaveLength(8);
    expect([...result.eventsPerPartition.values()], context).toEqual(Array(8).fill(1));
    expect([...result.runsPerPartition.values()], context).toEqual(Array(8).fill(1));
    // Both ingest runs were retried: try 1 was SIGKILLed mid-run.
    expect(result.ingest.map((run) => [run.state, run.tries])).toEqual([['success', 2], ['success', 2]]);

    // The control went through the same faults: every post it made is an asset event, duplicates and all.
    const plainEvents = [...result.plain.eventsPerPartition.values()].reduce((sum, count) => sum + count, 0);
    expect(plainEvents, context).toBe(result.plain.posts);
    expect(result.plain.dropped, context).toBeGreaterThan(0);
    expect(plainEvents, context).toBeGreaterThan(8);
  });
});
