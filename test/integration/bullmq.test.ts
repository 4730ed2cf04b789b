import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Queue, QueueEvents, Worker, type Job } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FencedError, onceboxProcessor } from '../../src/bullmq/index.js';
import { LifecycleAsset, openOutbox } from '../../src/outbox/index.js';
import { startScript } from '../support/child.js';
import { redisAvailable, redisConnection, redisSkipReason } from '../support/redis.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet = { info() {}, warn() {}, error() {} };
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

function queueName(): string {
  return `oncebox-test-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
}

async function newQueue(name: string): Promise<{ queue: Queue; events: QueueEvents }> {
  const queue = new Queue(name, { connection: redisConnection });
  const events = new QueueEvents(name, { connection: redisConnection });
  await events.waitUntilReady();
  cleanups.push(async () => {
    await events.close();
    await queue.obliterate({ force: true });
    await queue.close();
  });
  return { queue, events };
}

/** The batch loop of examples/bullmq-ingest.ts, in this process. */
const batchLoop = async (job: Job, box: Awaited<ReturnType<typeof openOutbox>>) => {
  const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
  const total = (job.data as { batches: number }).batches;
  for (let batch = (progress.get()?.batch ?? 0) + 1; batch <= total; batch++) {
    box.commit((tx) => {
      tx.set(progress, { batch });
      tx.emit(box.asset('batch_ready'), { partitionKey: `${job.id}/batch-${batch}` });
      tx.emit(box.asset('run_done'), { partitionKey: `${job.id}/batch-${batch}`, on: 'success' });
    });
  }
  return total;
};

function worker(name: string, server: RunningServer, dir: string, options: Partial<ConstructorParameters<typeof Worker>[2]> = {}): Worker {
  const started = new Worker(name, onceboxProcessor(batchLoop, { dir, server: server.url, producer: 'bullmq-ingest', outbox: { logger: quiet } }), {
    connection: redisConnection,
    ...options,
  });
  cleanups.push(() => started.close(true));
  return started;
}

const partitionsOf = async (server: RunningServer, asset: string) => (await server.events({ asset })).map((event) => event.partitionKey);

describe.skipIf(!redisAvailable)(`the BullMQ adapter against a real Redis${redisSkipReason}`, () => {
  it('runs a job as an oncebox run: each batch once, the held events released on success, the file removed once delivered', async () => {
    const server = await startServer();
    const dir = tempDir();
    const name = queueName();
    const { queue, events } = await newQueue(name);
    worker(name, server, dir);
    const job = await queue.add('ingest', { batches: 3 });
    expect(await job.waitUntilFinished(events, 30_000)).toBe(3);
    expect(await partitionsOf(server, 'batch_ready')).toEqual([1, 2, 3].map((n) => `${job.id}/batch-${n}`));
    expect(await partitionsOf(server, 'run_done')).toEqual([1, 2, 3].map((n) => `${job.id}/batch-${n}`));
    const [success] = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(success).toMatchObject({ producer: 'bullmq-ingest', workflow: name, runId: job.id, attempt: 1 });
    expect(existsSync(join(dir, name, `${job.id}.db`))).toBe(false);
  });

  it('fences a stalled worker: its job taken over, it commits nothing more, and every batch is on the server once', { timeout: 90_000 }, async () => {
    const server = await startServer();
    const dir = tempDir();
    const name = queueName();
    const { queue } = await newQueue(name);
    const job = await queue.add('ingest', { batches: 6 });
    // Worker A (its own process) blocks its event loop after batch 2, past its 1-second lock.
    const zombie = startScript('examples/bullmq-ingest.ts', ['--queue', name, '--server', server.url, '--dir', dir, '--lock-ms', '1000', '--block-after-batch', '2', '--block-ms', '6000']);
    await zombie.waitFor((line) => line.event === 'committed' && line.batch === 2);
    // Worker B finds the job stalled, claims the next attempt and finishes it from A's checkpoint.
    const replacement = worker(name, server, dir, { lockDuration: 1000, stalledInterval: 1000 });
    const done = new Promise<void>((resolve) => replacement.on('completed', () => resolve()));
    await done;
    const fenced = await zombie.waitFor((line) => line.event === 'fenced');
    expect(fenced).toMatchObject({ job: job.id, batch: 3, attempt: 1 });
    expect(await partitionsOf(server, 'batch_ready')).toEqual([1, 2, 3, 4, 5, 6].map((n) => `${job.id}/batch-${n}`));
    expect(await partitionsOf(server, 'run_done')).toEqual([1, 2, 3, 4, 5, 6].map((n) => `${job.id}/batch-${n}`));
    const successes = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(successes.map((event) => event.attempt)).toEqual([2]);
    // The takeover is on the record, for the notifiers' onFenced: attempt 1 fenced by attempt 2, once.
    const fences = await server.events({ asset: LifecycleAsset.Fenced });
    expect(fences.map((event) => event.extra)).toEqual([{ outcome: 'fenced', workflow: name, runId: job.id, task: null, attempt: 1, fencedBy: 2 }]);
    // BullMQ counted no new attempt for the stalled run: the attempt came from the server's claim.
    expect((await queue.getJob(job.id!))!.attemptsMade).toBeLessThan(2);
  });

  it('cannot reopen an old epoch with job.retry(): the retried job claims a higher attempt, and the old one stays fenced', { timeout: 60_000 }, async () => {
    const server = await startServer();
    const dir = tempDir();
    const name = queueName();
    const { queue, events } = await newQueue(name);
    let failNext = true;
    const flaky = new Worker(
      name,
      onceboxProcessor(
        async (job, box) => {
          await batchLoop(job, box);
          if (failNext) {
            failNext = false;
            throw new Error('downstream refused');
          }
          return 'ok';
        },
        { dir, server: server.url, producer: 'bullmq-ingest', outbox: { logger: quiet } },
      ),
      { connection: redisConnection },
    );
    cleanups.push(() => flaky.close(true));
    const job = await queue.add('ingest', { batches: 2 });
    await expect(job.waitUntilFinished(events, 30_000)).rejects.toThrow('downstream refused');
    // job.retry() resets BullMQ's counters: attemptsMade is 0 again.
    await (await queue.getJob(job.id!))!.retry('failed', { resetAttemptsMade: true });
    const retried = (await queue.getJob(job.id!))!;
    expect(await retried.waitUntilFinished(events, 30_000)).toBe('ok');
    const failures = await server.events({ asset: LifecycleAsset.Failed });
    const successes = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(failures.map((event) => event.attempt)).toEqual([1]);
    expect(successes.map((event) => event.attempt)).toEqual([2]);
    // Attempt 1, as a runner trusting attemptsMade would reopen it, can deliver nothing.
    const stale = await openOutbox({ path: join(tempDir(), 'stale.db'), server: server.url, producer: 'bullmq-ingest', run: { workflow: name, runId: job.id!, attempt: 1 }, logger: quiet });
    const late = stale.commit((tx) => tx.emit(stale.asset('batch_ready'), { partitionKey: `${job.id}/late` }));
    void late;
    const emission = stale.commit((tx) => tx.emit(stale.asset('batch_ready'), { partitionKey: `${job.id}/later` }));
    await expect(emission.receipt()).rejects.toThrow(FencedError);
    await stale.close({ timeoutMs: 0 });
    expect(await partitionsOf(server, 'batch_ready')).toEqual([`${job.id}/batch-1`, `${job.id}/batch-2`]);
  });
});
