import { Queue } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { LifecycleAsset } from '../../src/outbox/index.js';
import type { StoredEvent } from '../../src/protocol/wire.js';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { runScript, startScript, type StartedScript } from '../support/child.js';
import { redisAvailable, redisConnection, redisSkipReason, REDIS_URL } from '../support/redis.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';
import { planMischief, type Mischief } from '../support/bullmq-mischief.js';
import { seededRandom } from '../support/seeded-random.js';

/**
 * Several real BullMQ worker processes over a real Redis, misbehaving at random: event-loop stalls past
 * the lock (before the claim, at the processor's start, after a batch, before complete), SIGKILLs
 * mid-job, and planned throws that BullMQ counts as failed tries. The seed is printed; ONCEBOX_SEED
 * replays one. For every job, whatever happened: each batch once and in order, the held emissions once
 * and only for completed jobs, oncebox's outcome equal to BullMQ's final state, no try spent by a
 * worker that was not holding the job, and no lifecycle notice refused by the server.
 */

const SEEDS = process.env.ONCEBOX_SEED ? [Number(process.env.ONCEBOX_SEED)] : [20261201, 7];
const JOBS = 6;
/** Worker processes, each running two jobs at once: more slots than jobs, so that a stalled worker's job is taken over at once. */
const WORKERS = 4;
const LOCK_MS = 1000;

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

/** Keeps WORKERS worker processes alive, starting a new one (a fresh machine, in that layout) for each that dies. */
function supervise(name: string, server: RunningServer, layout: 'one machine' | 'several machines', next: () => number) {
  const sharedDir = tempDir();
  const workers: StartedScript[] = [];
  let stopped = false;
  const start = () => {
    // Most processes stall once before one of their claims, between BullMQ's hand-out and the adapter's
    // claim; not the first, which all processes reach together, with no one free to take the job over.
    const failpoint = next() < 0.75 ? `bullmq:before-claim@${2 + Math.floor(next() * 3)}:stall=${2500 + Math.floor(next() * 1500)}` : '';
    const dir = layout === 'one machine' ? sharedDir : tempDir();
    const child = startScript(
      'test/support/bullmq-chaos-worker.ts',
      ['--queue', name, '--server', server.url, '--dir', dir, '--redis', REDIS_URL.href, '--lock-ms', String(LOCK_MS), '--concurrency', '2'],
      { ONCEBOX_FAILPOINT: failpoint },
    );
    workers.push(child);
    void child.done.then(() => {
      if (!stopped) start();
    });
  };
  for (let i = 0; i < WORKERS; i++) start();
  return {
    workers,
    /** Every job outbox file of the shared folder, for the diagnosis of a job that never settled. */
    files: () => (layout === 'one machine' ? readdirSync(join(sharedDir, name), { withFileTypes: true }).filter((e) => e.name.endsWith('.db')).map((e) => join(sharedDir, name, e.name)) : []),
    stop: () => {
      stopped = true;
      for (const child of workers) child.signal('SIGKILL');
    },
  };
}

/** Waits until `read` answers the same for `stableMs` (or `timeoutMs` has passed: the assertions then tell). */
async function quiescent(read: () => Promise<string>, stableMs: number, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  let last = await read();
  let since = Date.now();
  while (Date.now() < until && Date.now() - since < stableMs) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const now = await read();
    if (now !== last) [last, since] = [now, Date.now()];
  }
}

async function settled(queue: Queue, ids: string[], timeoutMs: number): Promise<Map<string, { state: string; attemptsMade: number }>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const states = new Map<string, { state: string; attemptsMade: number }>();
    for (const id of ids) {
      const state = await queue.getJobState(id);
      // Read after the state, so that the counters are those of the finished job.
      states.set(id, { state, attemptsMade: (await queue.getJob(id))!.attemptsMade });
    }
    if ([...states.values()].every(({ state }) => state === 'completed' || state === 'failed')) return states;
    if (Date.now() > until) throw new Error(`jobs not settled after ${timeoutMs} ms: ${JSON.stringify([...states])}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe.skipIf(!redisAvailable)(`BullMQ workers misbehaving at random, against a real Redis${redisSkipReason}`, () => {
  for (const layout of ['one machine', 'several machines'] as const) {
    for (const seed of SEEDS) {
      it(`keeps every job's batches once and in order, and oncebox's outcome equal to BullMQ's (${layout}, seed ${seed})`, { timeout: 300_000 }, async () => {
        console.log(`bullmq chaos: ${layout}, seed ${seed} (replay with ONCEBOX_SEED=${seed})`);
        const next = seededRandom(seed);
        const server = await startServer();
        const name = `oncebox-chaos-${process.pid}-${Date.now().toString(36)}`;
        const queue = new Queue(name, { connection: redisConnection });
        cleanups.push(async () => {
          await queue.obliterate({ force: true });
          await queue.close();
        });
        const jobs: { batches: number; chaos: Record<string, Mischief> }[] = [];
        for (let j = 0; j < JOBS; j++) {
          const batches = 5 + Math.floor(next() * 6);
          jobs.push({ batches, chaos: planMischief(next, batches) });
        }
        const added = await queue.addBulk(jobs.map((data, j) => ({ name: 'ingest', data: { ...data, batchMs: 300 }, opts: { jobId: `job-${j}`, attempts: 3 } })));
        const ids = added.map((job) => job.id!);
        // Each job's oncebox run: its id and its creation time.
        const runs = new Map(added.map((job) => [job.id!, `${job.id}@${job.timestamp}`]));
        const pool = supervise(name, server, layout, next);
        cleanups.push(async () => pool.stop());
        const states = await settled(queue, ids, 120_000).catch(async (error: Error) => {
          // What each worker process said, and what each job's outbox holds, for the job that never settled.
          console.log(JSON.stringify(pool.workers.flatMap((child) => child.lines())));
          for (const file of pool.files()) console.log(file, JSON.stringify((await runScript('src/cli/main.ts', ['status', file, '--json'])).lines));
          throw error;
        });
        // The last relays deliver what their jobs committed before the jobs settled (a terminal commit's
        // checkpoint updates follow its events in the stream): wait until the server's view stops changing,
        // however loaded the machine, rather than for a fixed time.
        const view = async () =>
          JSON.stringify([
            (await server.events()).length,
            await Promise.all(ids.map(async (id) => (await fetch(`${server.url}/v1/streams/bullmq-ingest/${encodeURIComponent(runs.get(id)!)}`)).text())),
          ]);
        await quiescent(view, 1500, 60_000);
        const events = await server.events();
        const evidence = () => console.log(JSON.stringify(jobs), JSON.stringify(pool.workers.flatMap((c) => c.lines())), JSON.stringify([...states]), JSON.stringify(events));
        if (process.env.CHAOS_DEBUG) evidence();
        // A failure prints what every worker said and what the server holds: a run under load is not
        // replayed exactly by its seed, so the evidence is kept from the run that failed.
        try {
          for (const [j, id] of ids.entries()) {
            const { state, attemptsMade } = states.get(id)!;
            const ofJob = (asset: string) => events.filter((event) => event.runId === runs.get(id) && event.asset === asset);
            const partitions = (asset: string) => ofJob(asset).map((event) => event.partitionKey);
            const context = `${id} (${state}, ${attemptsMade} tries; chaos ${JSON.stringify(jobs[j]!.chaos)})`;
            const want = Array.from({ length: jobs[j]!.batches }, (_, i) => `${id}/batch-${i + 1}`);
            const ready = partitions('batch_ready');
            // Each batch once, in commit order: a prefix of the batches, all of them for a completed job.
            expect(ready, context).toEqual(want.slice(0, ready.length));
            const successes = ofJob(LifecycleAsset.Succeeded);
            const failures = ofJob(LifecycleAsset.Failed).map((event: StoredEvent) => (event.extra as { willRetry: boolean }).willRetry);
            if (state === 'completed') {
              expect(ready, context).toEqual(want);
              expect([...partitions('run_done')].sort(), context).toEqual([...want].sort());
              expect(successes, context).toHaveLength(1);
              expect(failures.every((willRetry) => willRetry), context).toBe(true);
              // A fenced or stalled worker spent no try: every try BullMQ counted is a failure on record, or the
              // success. (A failure can be on record that BullMQ did not count: its worker lost the lock after
              // the terminal commit, and BullMQ handed the job out again. docs/runners.md.)
              expect(failures.length, context).toBeGreaterThanOrEqual(attemptsMade - 1);
            } else {
              expect(partitions('run_done'), context).toEqual([]);
              expect(successes, context).toEqual([]);
              expect(failures.at(-1), context).toBe(false);
              expect(failures.filter((willRetry) => !willRetry), context).toHaveLength(1);
              expect(failures.length, context).toBeGreaterThanOrEqual(attemptsMade);
            }
            const stream = (await (await fetch(`${server.url}/v1/streams/bullmq-ingest/${encodeURIComponent(runs.get(id)!)}`)).json()) as { checkpoints: Record<string, unknown> };
            // Nothing left held: released by a success, or marked discarded by a failure for good.
            const mirrored = (stream.checkpoints['oncebox.held'] ?? []) as { discarded?: boolean }[];
            expect(mirrored.filter((entry) => entry.discarded !== true), context).toEqual([]);
            if (state === 'completed') expect(mirrored, context).toEqual([]);
          }
          // Every notice a worker committed reached the server: none refused (a fenced worker's are fenced,
          // which is not a refusal), whichever hand-out delivered it.
          expect(await server.refusedNotices()).toEqual([]);
        } catch (error) {
          evidence();
          throw error;
        }
        const outcomes = [...states.values()].map(({ state }) => state);
        const lines = pool.workers.flatMap((child) => child.lines());
        console.log(
          `bullmq chaos: ${outcomes.filter((s) => s === 'completed').length} completed, ${outcomes.filter((s) => s === 'failed').length} failed; ` +
            `${pool.workers.length - WORKERS} worker processes killed, ${lines.filter((line) => line.failpoint !== undefined).length} stalls before a claim, ` +
            `${lines.filter((line) => line.event === 'start').length} processor starts`,
        );
      });
    }
  }
});
