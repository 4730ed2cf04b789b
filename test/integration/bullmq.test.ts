import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { DelayedError, Queue, QueueEvents, UnrecoverableError, Worker, type Job } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FencedError, onceboxWorker, type OnceboxWorkerOptions } from '../../src/bullmq/index.js';
import { LifecycleAsset, openOutbox } from '../../src/outbox/index.js';
import { startScript, type StartedScript } from '../support/child.js';
import { redisAvailable, redisConnection, redisSkipReason, REDIS_URL } from '../support/redis.js';
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

/** The batch loop of examples/bullmq-ingest.ts, in this process, `batchMs` apart. */
const batchLoop =
  (batchMs = 0) =>
  async (job: Job, box: Awaited<ReturnType<typeof openOutbox>>) => {
    const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
    const total = (job.data as { batches: number }).batches;
    for (let batch = (progress.get()?.batch ?? 0) + 1; batch <= total; batch++) {
      box.commit((tx) => {
        tx.set(progress, { batch });
        tx.emit(box.asset('batch_ready'), { partitionKey: `${job.id}/batch-${batch}` });
        tx.emit(box.asset('run_done'), { partitionKey: `${job.id}/batch-${batch}`, on: 'success' });
      });
      if (batchMs > 0) await new Promise((resolve) => setTimeout(resolve, batchMs));
    }
    return total;
  };

type Processor = Parameters<typeof onceboxWorker<unknown>>[1];

/** An oncebox worker in this process; its worker `error` events are collected in `errors`. */
function worker(
  name: string,
  server: RunningServer,
  dir: string,
  options: { processor?: Processor; worker?: Partial<OnceboxWorkerOptions['worker']>; oncebox?: Partial<OnceboxWorkerOptions> } = {},
) {
  const started = onceboxWorker(name, options.processor ?? batchLoop(), {
    dir,
    server: server.url,
    producer: 'bullmq-ingest',
    outbox: { logger: quiet },
    ...options.oncebox,
    worker: { connection: redisConnection, ...options.worker },
  });
  const errors: string[] = [];
  started.on('error', (error) => errors.push(error.message));
  cleanups.push(() => started.close(true));
  return { worker: started, errors };
}

/** The oncebox run of a BullMQ job: its id and its creation time. */
const runOf = (job: Job) => `${job.id}@${job.timestamp}`;

const partitionsOf = async (server: RunningServer, asset: string) => (await server.events({ asset })).map((event) => event.partitionKey);
const batches = (jobId: string | undefined, count: number) => Array.from({ length: count }, (_, i) => `${jobId}/batch-${i + 1}`);

/** Worker A: examples/bullmq-ingest.ts in its own process, with a 1-second lock and an armed stall. */
function stallingWorker(name: string, server: RunningServer, dir: string, failpoint: string, extra: string[] = []): StartedScript {
  return startScript(
    'examples/bullmq-ingest.ts',
    ['--queue', name, '--server', server.url, '--dir', dir, '--redis', REDIS_URL.href, '--lock-ms', '1000', ...extra],
    { ONCEBOX_FAILPOINT: failpoint },
  );
}

/** A line of a worker that tried to end a job whose lock another worker holds, or nobody does, and failed. */
const refusedMove = (line: Record<string, unknown>) =>
  line.event === 'failed' || (line.event === 'worker-error' && /Missing lock|Lock mismatch/.test(String(line.message)));

/** Waits until the server holds the job's run's notice on `asset`, or has refused a notice (the assertions then tell). */
async function waitForDelivered(server: RunningServer, job: Job, asset: string): Promise<void> {
  const arrived = async () => (await server.events({ asset })).some((event) => event.runId === runOf(job)) || (await server.refusedNotices()).length > 0;
  while (!(await arrived())) await new Promise((resolve) => setTimeout(resolve, 50));
}

/** Waits until the job is completed or failed in BullMQ, and returns its state and counters. */
async function finalState(queue: Queue, id: string, timeoutMs = 30_000): Promise<{ state: string; attemptsMade: number; attemptsStarted: number }> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const state = await queue.getJobState(id);
    // Read after the state, so that the counters are those of the finished job.
    const job = (await queue.getJob(id))!;
    if (state === 'completed' || state === 'failed') return { state, attemptsMade: job.attemptsMade, attemptsStarted: job.attemptsStarted };
    if (Date.now() > until) throw new Error(`job ${id} still ${state} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe.skipIf(!redisAvailable)(`the BullMQ adapter against a real Redis${redisSkipReason}`, () => {
  it('runs a job as an oncebox run: each batch once, the held events released on success, the file removed once delivered', async () => {
    const server = await startServer();
    const dir = tempDir();
    const name = queueName();
    const { queue, events } = await newQueue(name);
    worker(name, server, dir);
    const job = await queue.add('ingest', { batches: 3 });
    expect(await job.waitUntilFinished(events, 30_000)).toBe(3);
    expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 3));
    expect(await partitionsOf(server, 'run_done')).toEqual(batches(job.id, 3));
    const [success] = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(success).toMatchObject({ producer: 'bullmq-ingest', workflow: name, runId: runOf(job), attempt: 1 });
    expect(existsSync(join(dir, name, `${runOf(job)}.db`))).toBe(false);
  });

  it('fences a stalled worker: its job taken over, it commits nothing more, and every batch is on the server once', { timeout: 180_000 }, async () => {
    const server = await startServer();
    const dir = tempDir();
    const name = queueName();
    const { queue } = await newQueue(name);
    const job = await queue.add('ingest', { batches: 6 });
    // Worker A (its own process) blocks its event loop after batch 2, past its 1-second lock.
    const zombie = startScript('examples/bullmq-ingest.ts', ['--queue', name, '--server', server.url, '--dir', dir, '--redis', REDIS_URL.href, '--lock-ms', '1000', '--block-after-batch', '2', '--block-ms', '6000']);
    await zombie.waitFor((line) => line.event === 'committed' && line.batch === 2);
    // Worker B finds the job stalled, claims the next attempt and finishes it from A's checkpoint.
    const replacement = worker(name, server, dir, { worker: { lockDuration: 1000, stalledInterval: 1000 } });
    const done = new Promise<void>((resolve) => replacement.worker.on('completed', () => resolve()));
    await done;
    const fenced = await zombie.waitFor((line) => line.event === 'fenced');
    expect(fenced).toMatchObject({ job: job.id, batch: 3, attempt: 1 });
    expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 6));
    expect(await partitionsOf(server, 'run_done')).toEqual(batches(job.id, 6));
    const successes = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(successes.map((event) => event.attempt)).toEqual([2]);
    // The takeover is on the record, for the notifiers' onFenced: attempt 1 fenced by attempt 2, once.
    const fences = await server.events({ asset: LifecycleAsset.Fenced });
    expect(fences.map((event) => event.extra)).toEqual([{ outcome: 'fenced', workflow: name, runId: runOf(job), task: null, attempt: 1, fencedBy: 2 }]);
    // The fenced worker cost the job no try: the one finished try is the success.
    expect(await finalState(queue, job.id!)).toMatchObject({ state: 'completed', attemptsMade: 1 });
  });

  it('cannot reopen an old epoch with job.retry(): the retried job claims a higher attempt, and the old one stays fenced', { timeout: 180_000 }, async () => {
    const server = await startServer();
    const dir = tempDir();
    const name = queueName();
    const { queue, events } = await newQueue(name);
    let failNext = true;
    worker(name, server, dir, {
      processor: async (job, box) => {
        await batchLoop()(job, box);
        if (failNext) {
          failNext = false;
          throw new Error('downstream refused');
        }
        return 'ok';
      },
    });
    const job = await queue.add('ingest', { batches: 2 });
    await expect(job.waitUntilFinished(events, 30_000)).rejects.toThrow('downstream refused');
    // job.retry() resets BullMQ's counters: attemptsMade and attemptsStarted are 0 again.
    await (await queue.getJob(job.id!))!.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
    const retried = (await queue.getJob(job.id!))!;
    expect(await retried.waitUntilFinished(events, 30_000)).toBe('ok');
    const failures = await server.events({ asset: LifecycleAsset.Failed });
    const successes = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(failures.map((event) => [event.attempt, (event.extra as { willRetry: boolean }).willRetry])).toEqual([[1, false]]);
    expect(successes.map((event) => event.attempt)).toEqual([2]);
    // Attempt 1, as a runner trusting attemptsMade would reopen it, can deliver nothing.
    const stale = await openOutbox({ path: join(tempDir(), 'stale.db'), server: server.url, producer: 'bullmq-ingest', run: { workflow: name, runId: runOf(job), attempt: 1 }, logger: quiet });
    const late = stale.commit((tx) => tx.emit(stale.asset('batch_ready'), { partitionKey: `${job.id}/late` }));
    void late;
    const emission = stale.commit((tx) => tx.emit(stale.asset('batch_ready'), { partitionKey: `${job.id}/later` }));
    await expect(emission.receipt()).rejects.toThrow(FencedError);
    await stale.close({ timeoutMs: 0 });
    expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 2));
  });

  describe('a worker paused at the worst moment: the attempt that wins is the one that holds the lock', () => {
    /**
     * Worker A, in its own process, is handed the job and stalls at `failpoint` past its lock. Worker B,
     * here, takes the job over, and is still committing (30 batches, 100 ms apart) when A wakes. A must
     * stop without claiming over B, committing or failing the job; B finishes; BullMQ and the server agree.
     */
    async function pausedWorker(failpoint: string, layout: 'one machine' | 'two machines', extra: string[] = []) {
      const server = await startServer();
      const dirA = tempDir();
      const dirB = layout === 'one machine' ? dirA : tempDir();
      const name = queueName();
      const { queue } = await newQueue(name);
      const job = await queue.add('ingest', { batches: 30 }, { attempts: 1 });
      const a = stallingWorker(name, server, dirA, failpoint, ['--batch-ms', '5', ...extra]);
      const stall = await a.waitFor((line) => line.failpoint !== undefined);
      const stalledAt = Date.now();
      const b = worker(name, server, dirB, { processor: batchLoop(100), worker: { lockDuration: 1000, stalledInterval: 1000 } });
      const final = await finalState(queue, job.id!, 40_000);
      // Give A time to wake and finish whatever it does then.
      const wakesAt = stalledAt + Number(stall.stall);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, wakesAt - Date.now()) + 2000));
      return { server, queue, job, a, b, final };
    }

    for (const layout of ['one machine', 'two machines'] as const) {
      it(`between the hand-out and the claim (${layout}): A claims nothing, B completes, and BullMQ and the server agree`, { timeout: 180_000 }, async () => {
        const { server, job, a, b, final } = await pausedWorker('bullmq:before-claim@1:stall=3500', layout);
        expect(final).toMatchObject({ state: 'completed', attemptsMade: 1 });
        expect(b.errors).toEqual([]);
        expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 30));
        expect(await partitionsOf(server, 'run_done')).toEqual(batches(job.id, 30));
        const successes = await server.events({ asset: LifecycleAsset.Succeeded });
        expect(successes).toHaveLength(1);
        expect(await server.events({ asset: LifecycleAsset.Failed })).toEqual([]);
        // A never started the processor: it took no attempt, and nothing of it is on the server.
        const lines = a.lines();
        expect(lines.filter((line) => line.event === 'start' || line.event === 'committed')).toEqual([]);
        expect((await server.events()).every((event) => event.attempt === successes[0]!.attempt)).toBe(true);
      });
    }

    it('after the claim, before the first commit: A stops quietly and B, claiming above it, completes', { timeout: 180_000 }, async () => {
      const { server, job, a, b, final } = await pausedWorker('bullmq:after-claim@1:stall=3500', 'two machines');
      expect(final).toMatchObject({ state: 'completed', attemptsMade: 1 });
      expect(b.errors).toEqual([]);
      expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 30));
      const [success, ...more] = await server.events({ asset: LifecycleAsset.Succeeded });
      expect(more).toEqual([]);
      expect(success!.attempt).toBe(2);
      const lines = a.lines();
      expect(lines.filter((line) => line.event === 'start' || line.event === 'committed')).toEqual([]);
      // A let the job go without a move BullMQ would refuse: no "Missing lock" or "Lock mismatch" from it.
      expect(lines.filter(refusedMove)).toEqual([]);
    });

    for (const layout of ['one machine', 'two machines'] as const) {
      it(`before complete() (${layout}): A's success is never recorded, B's is, and the held events are released once`, { timeout: 180_000 }, async () => {
        const { server, job, a, b, final } = await pausedWorker('bullmq:before-complete@1:stall=3500', layout);
        expect(final).toMatchObject({ state: 'completed', attemptsMade: 1 });
        expect(b.errors).toEqual([]);
        expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 30));
        expect((await partitionsOf(server, 'run_done')).sort()).toEqual(batches(job.id, 30).sort());
        const successes = await server.events({ asset: LifecycleAsset.Succeeded });
        expect(successes.map((event) => event.attempt)).toEqual([2]);
        const lines = a.lines();
        expect(lines.filter((line) => line.event === 'done' || line.event === 'failed')).toEqual([]);
        expect(lines.filter(refusedMove)).toEqual([]);
      });
    }
  });

  it('puts the job back, costing none of its tries, when the worker that holds the lock is fenced from outside the adapter', { timeout: 180_000 }, async () => {
    const server = await startServer();
    const name = queueName();
    const { queue, events } = await newQueue(name);
    let claimedOver = false;
    const loop = batchLoop(20);
    const { errors } = worker(name, server, tempDir(), {
      processor: async (job, box) => {
        if (!claimedOver) {
          // Someone claims the run's next attempt by hand while this worker holds the job.
          claimedOver = true;
          const answer = await fetch(`${server.url}/v1/streams/bullmq-ingest/${encodeURIComponent(runOf(job))}/attempts`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
          expect(answer.status).toBe(201);
        }
        return loop(job, box);
      },
    });
    const job = await queue.add('ingest', { batches: 8 }, { attempts: 1 });
    expect(await job.waitUntilFinished(events, 30_000)).toBe(8);
    expect(await finalState(queue, job.id!)).toMatchObject({ state: 'completed', attemptsMade: 1 });
    expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 8));
    expect(await partitionsOf(server, 'run_done')).toEqual(batches(job.id, 8));
    const [success, ...more] = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(more).toEqual([]);
    // Attempt 1 was fenced by the hand claim (2); the job's next hand-out claimed above both.
    expect(success!.attempt).toBe(3);
    expect(await server.events({ asset: LifecycleAsset.Failed })).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("takes willRetry from BullMQ's own rule: an UnrecoverableError is the job's last try, whatever its attempts", { timeout: 30_000 }, async () => {
    const server = await startServer();
    const name = queueName();
    const { queue, events } = await newQueue(name);
    worker(name, server, tempDir(), {
      processor: async (job, box) => {
        await batchLoop()(job, box);
        throw new UnrecoverableError('the input is corrupt');
      },
    });
    const job = await queue.add('ingest', { batches: 2 }, { attempts: 5 });
    await expect(job.waitUntilFinished(events, 20_000)).rejects.toThrow('the input is corrupt');
    expect(await finalState(queue, job.id!)).toMatchObject({ state: 'failed', attemptsMade: 1 });
    const failures = await server.events({ asset: LifecycleAsset.Failed });
    expect(failures.map((event) => (event.extra as { willRetry: boolean }).willRetry)).toEqual([false]);
    expect(await partitionsOf(server, 'run_done')).toEqual([]);
  });

  for (const move of ['DelayedError', 'RateLimitError'] as const) {
    it(`counts no failure when the processor moves its job itself (${move}), and the next hand-out resumes it`, { timeout: 30_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const { queue, events } = await newQueue(name);
      let moved = false;
      const started = worker(name, server, tempDir(), {
        processor: async (job, box, token) => {
          const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
          if (!moved) {
            box.commit((tx) => {
              tx.set(progress, { batch: 1 });
              tx.emit(box.asset('batch_ready'), { partitionKey: `${job.id}/batch-1` });
            });
            moved = true;
            // BullMQ's own ways for a processor to put its job aside: the lock goes with a delay, and
            // stays with a rate limit, until BullMQ moves the job back to waiting.
            if (move === 'DelayedError') {
              await job.moveToDelayed(Date.now() + 300, token);
              throw new DelayedError();
            }
            await started.worker.rateLimit(300);
            throw Worker.RateLimitError();
          }
          return batchLoop()(job, box);
        },
      });
      const job = await queue.add('ingest', { batches: 3 }, { attempts: 1 });
      expect(await job.waitUntilFinished(events, 20_000)).toBe(3);
      expect(await finalState(queue, job.id!)).toMatchObject({ state: 'completed', attemptsMade: 1 });
      expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 3));
      expect(await server.events({ asset: LifecycleAsset.Failed })).toEqual([]);
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
      // Put aside by its own processor, the first attempt was not fenced: no notice says so.
      expect(await server.events({ asset: LifecycleAsset.Fenced })).toEqual([]);
    });
  }

  for (const [ending, layout, delivered] of [
    ['complete', 'another machine', true],
    ['fail for good', 'another machine', true],
    ['complete', 'the same machine', false],
    ['fail for good', 'the same machine', false],
    ['fail with a retry to come', 'the same machine', false],
  ] as const) {
    const when = delivered ? 'after its relay delivered it' : 'before its relay sent it';
    it(`ends the job as the run ended when its worker died after the terminal commit, ${when} and before BullMQ heard (${ending}, next hand-out on ${layout})`, { timeout: 180_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const { queue } = await newQueue(name);
      const chaos = ending === 'complete' ? {} : { '1': { throwAfter: 2 } };
      const retries = ending === 'fail with a retry to come';
      const job = await queue.add('ingest', { batches: 4, batchMs: 10, chaos }, { attempts: retries ? 2 : 1 });
      // Worker A ends the run in oncebox, and is killed before BullMQ records the end: after its relay
      // delivered the lifecycle notice, or right after the terminal commit (the job record written at the
      // start, 4 batches and the success, or 2 batches and the failure), before the relay is woken: the
      // next hand-out on its machine takes the notice over and delivers it.
      const machineA = tempDir();
      const killAt = delivered ? 'bullmq:after-terminal@1' : `commit:after-commit@${ending === 'complete' ? 6 : 4}`;
      const a = startScript(
        'test/support/bullmq-chaos-worker.ts',
        ['--queue', name, '--server', server.url, '--dir', machineA, '--redis', REDIS_URL.href, '--lock-ms', '1000'],
        { ONCEBOX_FAILPOINT: killAt },
      );
      const killed = await a.done;
      expect(killed.signal).toBe('SIGKILL');
      expect(killed.lines.at(-1)).toMatchObject({ failpoint: killAt.split('@')[0], kill: true });
      if (!delivered) expect(await server.events({ asset: ending === 'complete' ? LifecycleAsset.Succeeded : LifecycleAsset.Failed })).toEqual([]);
      // Worker B is handed the stalled job: it must not run it again, unless a retry is to come.
      let ran = 0;
      const b = worker(name, server, layout === 'the same machine' ? machineA : tempDir(), {
        processor: async (j, box) => {
          ran++;
          return batchLoop()(j, box);
        },
        worker: { lockDuration: 1000, stalledInterval: 1000 },
      });
      const final = await finalState(queue, job.id!);
      expect(ran).toBe(retries ? 1 : 0);
      expect(b.errors).toEqual([]);
      // Once B's relay has delivered what it took over: nothing of the run left in B's file.
      await waitForDelivered(server, job, ending === 'complete' || retries ? LifecycleAsset.Succeeded : LifecycleAsset.Failed);
      expect(await server.refusedNotices()).toEqual([]);
      const successes = await server.events({ asset: LifecycleAsset.Succeeded });
      const failures = (await server.events({ asset: LifecycleAsset.Failed })).map((event) => [(event.extra as { attempt: number }).attempt, (event.extra as { willRetry: boolean }).willRetry]);
      if (retries) {
        expect(final.state).toBe('completed');
        expect(successes).toHaveLength(1);
        expect(failures).toEqual([[1, true]]);
        expect(await partitionsOf(server, 'run_done')).toEqual(batches(job.id, 4));
        expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 4));
      } else if (ending === 'complete') {
        expect(final.state).toBe('completed');
        expect(successes).toHaveLength(1);
        expect(failures).toEqual([]);
        expect(await partitionsOf(server, 'run_done')).toEqual(batches(job.id, 4));
      } else {
        expect(final.state).toBe('failed');
        expect(successes).toEqual([]);
        expect(failures).toEqual([[1, false]]);
        // The catalog agrees with BullMQ, whichever hand-out delivered the failure.
        const stream = await (await fetch(`${server.url}/v1/catalog/streams/bullmq-ingest/${encodeURIComponent(runOf(job))}`)).json();
        expect(stream).toMatchObject({ outcome: 'failed', willRetry: false });
        expect(await partitionsOf(server, 'run_done')).toEqual([]);
        expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 2));
      }
    });
  }

  for (const ending of ['complete', 'fail for good'] as const) {
    it(`ends the job as the run ended elsewhere when the next hand-out lands on a machine holding an older file of it (${ending})`, { timeout: 180_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const { queue } = await newQueue(name);
      const machineB = tempDir();
      // Hand-out 1 fails (a retry to come) on machine B; hand-out 2 ends the run on machine A, whose
      // worker is killed before BullMQ hears of it; hand-out 3 lands on machine B again, whose file of the
      // job stopped at hand-out 1.
      const chaos = ending === 'complete' ? { '1': { throwAfter: 1 } } : { '1': { throwAfter: 1 }, '2': { throwAfter: 2 } };
      const job = await queue.add('ingest', { batches: 4, batchMs: 10, chaos }, { attempts: 2, backoff: { type: 'fixed', delay: 4000 } });
      const args = (dir: string) => ['--queue', name, '--server', server.url, '--dir', dir, '--redis', REDIS_URL.href, '--lock-ms', '1000'];
      const first = startScript('test/support/bullmq-chaos-worker.ts', args(machineB));
      await first.waitFor((line) => line.event === 'failed');
      first.signal('SIGKILL');
      await first.done;
      // Machine B keeps its file of the job: a retry is to come.
      expect(readdirSync(machineB, { recursive: true }).filter((file) => String(file).endsWith('.db'))).toHaveLength(1);
      const a = startScript('test/support/bullmq-chaos-worker.ts', args(tempDir()), { ONCEBOX_FAILPOINT: 'bullmq:after-terminal@1' });
      expect((await a.done).signal).toBe('SIGKILL');
      let ran = 0;
      const b = worker(name, server, machineB, {
        processor: async (j, box) => {
          ran++;
          return batchLoop()(j, box);
        },
        worker: { lockDuration: 1000, stalledInterval: 1000 },
      });
      const final = await finalState(queue, job.id!);
      expect(ran).toBe(0);
      expect(b.errors).toEqual([]);
      const failures = (await server.events({ asset: LifecycleAsset.Failed })).map((event) => (event.extra as { willRetry: boolean }).willRetry);
      expect(final.state).toBe(ending === 'complete' ? 'completed' : 'failed');
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(ending === 'complete' ? 1 : 0);
      expect(failures).toEqual(ending === 'complete' ? [true] : [true, false]);
      expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, ending === 'complete' ? 4 : 3));
    });
  }

  for (const layout of ['one machine', 'two machines'] as const) {
    it(`records the failure of a job BullMQ fails without running the processor (stalled more than maxStalledCount), its held emissions discarded (${layout})`, { timeout: 180_000 }, async () => {
      const server = await startServer();
      const dirA = tempDir();
      const dirB = layout === 'one machine' ? dirA : tempDir();
      const name = queueName();
      const { queue } = await newQueue(name);
      const job = await queue.add('ingest', { batches: 20, batchMs: 50, chaos: { '1': { killAfter: 3 } } }, { attempts: 3 });
      // Worker A commits 3 batches, holding their run_done events, and is killed.
      const a = startScript('test/support/bullmq-chaos-worker.ts', ['--queue', name, '--server', server.url, '--dir', dirA, '--redis', REDIS_URL.href, '--lock-ms', '1000', '--max-stalled', '0']);
      expect((await a.done).signal).toBe('SIGKILL');
      // Worker B sees the job stalled once more than maxStalledCount (0) allows: BullMQ fails it when it
      // hands it out, without calling the processor. B's failed listener records it.
      const b = worker(name, server, dirB, { worker: { lockDuration: 1000, stalledInterval: 1000, maxStalledCount: 0 } });
      expect(await finalState(queue, job.id!)).toMatchObject({ state: 'failed' });
      let failures = await server.events({ asset: LifecycleAsset.Failed });
      for (let waited = 0; failures.length === 0 && waited < 10_000; waited += 100) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        failures = await server.events({ asset: LifecycleAsset.Failed });
      }
      expect(failures.map((event) => (event.extra as { willRetry: boolean }).willRetry)).toEqual([false]);
      expect(failures[0]!.attempt).toBeGreaterThan(1);
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toEqual([]);
      expect(await partitionsOf(server, 'run_done')).toEqual([]);
      const ready = await partitionsOf(server, 'batch_ready');
      // On A's machine, B's outbox takes over what A committed and had not delivered; on another, what A
      // did not deliver stays in A's lost file.
      if (layout === 'one machine') expect(ready).toEqual(batches(job.id, 3));
      else expect(ready).toEqual(batches(job.id, 3).slice(0, ready.length));
      // The server's copy of the held emissions says they are discarded: only a job.retry() holds them again.
      const stream = (await (await fetch(`${server.url}/v1/streams/bullmq-ingest/${encodeURIComponent(runOf(job))}`)).json()) as { checkpoints: Record<string, unknown> };
      const mirrored = stream.checkpoints['oncebox.held'] as { discarded?: boolean }[];
      expect(mirrored.length).toBeGreaterThan(0);
      expect(mirrored.every((entry) => entry.discarded === true)).toBe(true);
      expect(b.errors).toEqual([]);
    });
  }

  describe('the end of a run, which oncebox records first and BullMQ second', () => {
    it('completes a job whose run succeeded and whose worker then stalled past maxStalledCount: the failed listener puts it back', { timeout: 180_000 }, async () => {
      const server = await startServer();
      const dir = tempDir();
      const name = queueName();
      const { queue } = await newQueue(name);
      const job = await queue.add('ingest', { batches: 3, batchMs: 10 }, { attempts: 1 });
      // A delivers the run's success, then stalls before BullMQ hears of it; maxStalledCount 0 makes
      // BullMQ fail the job when B is handed it, without running the processor.
      const a = startScript(
        'test/support/bullmq-chaos-worker.ts',
        ['--queue', name, '--server', server.url, '--dir', dir, '--redis', REDIS_URL.href, '--lock-ms', '1000', '--max-stalled', '0'],
        { ONCEBOX_FAILPOINT: 'bullmq:after-terminal@1:stall=6000' },
      );
      await a.waitFor((line) => line.failpoint !== undefined);
      const b = worker(name, server, dir, { worker: { lockDuration: 1000, stalledInterval: 1000, maxStalledCount: 0 } });
      // BullMQ fails it first, for stalling; the listener puts it back, and its next hand-out completes it.
      const failed = new Promise<void>((resolve) => b.worker.on('failed', () => resolve()));
      await failed;
      for (let waited = 0; (await queue.getJobState(job.id!)) !== 'completed' && waited < 20_000; waited += 100) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(await queue.getJobState(job.id!)).toBe('completed');
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
      expect(await server.events({ asset: LifecycleAsset.Failed })).toEqual([]);
      expect(await partitionsOf(server, 'run_done')).toEqual(batches(job.id, 3));
      expect(b.errors).toEqual([]);
    });

    it('releases every held emission once when a job that failed for good is retried with job.retry() and succeeds, also when that retry is killed', { timeout: 180_000 }, async () => {
      const server = await startServer();
      const dir = tempDir();
      const name = queueName();
      const { queue, events } = await newQueue(name);
      // Hand-out 1 fails after 2 batches, for good; the retry's first hand-out (2) is killed after 1 batch.
      const job = await queue.add('ingest', { batches: 5, batchMs: 20, chaos: { '1': { throwAfter: 2 }, '2': { killAfter: 1 } } }, { attempts: 1 });
      // A lock long enough that a loaded machine makes no stall of its own: the kill is the one meant.
      const args = ['--queue', name, '--server', server.url, '--dir', dir, '--redis', REDIS_URL.href, '--lock-ms', '3000'];
      const first = startScript('test/support/bullmq-chaos-worker.ts', args);
      await first.waitFor((line) => line.event === 'failed');
      expect(await finalState(queue, job.id!)).toMatchObject({ state: 'failed', attemptsMade: 1 });
      expect(await partitionsOf(server, 'run_done')).toEqual([]);
      await (await queue.getJob(job.id!))!.retry('failed');
      expect((await first.done).signal).toBe('SIGKILL');
      // Another worker takes the killed retry over and finishes it.
      const b = worker(name, server, dir, { processor: batchLoop(10), worker: { lockDuration: 3000, stalledInterval: 1000 } });
      expect(await (await queue.getJob(job.id!))!.waitUntilFinished(events, 30_000)).toBe(5);
      expect(await partitionsOf(server, 'batch_ready')).toEqual(batches(job.id, 5));
      expect([...(await partitionsOf(server, 'run_done'))].sort()).toEqual(batches(job.id, 5).sort());
      expect((await server.events({ asset: LifecycleAsset.Failed })).map((event) => (event.extra as { willRetry: boolean }).willRetry)).toEqual([false]);
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
      expect(b.errors).toEqual([]);
    });

    it('holds a job whose end the server cannot take yet, and completes it once the server is back', { timeout: 180_000 }, async () => {
      const dbDir = tempDir();
      const first = await startServer({ db: join(dbDir, 'server.db') });
      const port = Number(new URL(first.url).port);
      const name = queueName();
      const { queue, events } = await newQueue(name);
      let restarted: RunningServer | undefined;
      worker(name, first, tempDir(), {
        processor: async (job, box) => {
          const total = await batchLoop(10)(job, box);
          // The server goes away as the job ends, and comes back 4 s later.
          await first.close();
          setTimeout(() => void startServer({ db: join(dbDir, 'server.db'), port }).then((running) => (restarted = running)), 4000);
          return total;
        },
        oncebox: { closeTimeoutMs: 1000, outbox: { logger: quiet, retryMaxDelayMs: 300 } },
      });
      const job = await queue.add('ingest', { batches: 3 }, { attempts: 1 });
      await new Promise((resolve) => setTimeout(resolve, 3000));
      expect(await queue.getJobState(job.id!)).toBe('active');
      expect(await job.waitUntilFinished(events, 30_000)).toBe(3);
      expect(await restarted!.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
      expect(await partitionsOf(restarted!, 'run_done')).toEqual(batches(job.id, 3));
    });

    it('fails a job whose processor returns what BullMQ cannot store, in BullMQ and in oncebox alike', { timeout: 30_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const { queue, events } = await newQueue(name);
      worker(name, server, tempDir(), { processor: async (job, box) => (await batchLoop()(job, box), BigInt(1)) as never });
      const job = await queue.add('ingest', { batches: 2 }, { attempts: 1 });
      await expect(job.waitUntilFinished(events, 20_000)).rejects.toThrow('cannot store as JSON');
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toEqual([]);
      expect((await server.events({ asset: LifecycleAsset.Failed })).map((event) => (event.extra as { willRetry: boolean }).willRetry)).toEqual([false]);
      expect(await partitionsOf(server, 'run_done')).toEqual([]);
    });
  });

  describe('job identity', () => {
    it('makes a job id used again a new run: a custom id added again after the first job was removed publishes all its own batches', { timeout: 30_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const { queue, events } = await newQueue(name);
      worker(name, server, tempDir());
      const first = await queue.add('ingest', { batches: 2 }, { jobId: 'daily-report' });
      expect(await first.waitUntilFinished(events, 20_000)).toBe(2);
      await (await queue.getJob('daily-report'))!.remove();
      const second = await queue.add('ingest', { batches: 4 }, { jobId: 'daily-report' });
      expect(await second.waitUntilFinished(events, 20_000)).toBe(4);
      const ready = await server.events({ asset: 'batch_ready' });
      expect(ready.filter((event) => event.runId === runOf(first)).map((event) => event.partitionKey)).toEqual(batches('daily-report', 2));
      expect(ready.filter((event) => event.runId === runOf(second)).map((event) => event.partitionKey)).toEqual(batches('daily-report', 4));
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(2);
    });

    it('gives job ids of any characters files of their own, and refuses a job id too long to be a run id, at once', { timeout: 30_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const { queue, events } = await newQueue(name);
      const dir = tempDir();
      worker(name, server, dir, { worker: { concurrency: 4 } });
      // Two ids that a %XX encoding of code units would give the same file name, a long one, and a path.
      const jobs = await Promise.all(['一', 'Ӡ0', 'é'.repeat(90), '../../escape'].map((jobId) => queue.add('ingest', { batches: 2 }, { jobId })));
      for (const job of jobs) expect(await job.waitUntilFinished(events, 20_000)).toBe(2);
      const ready = await server.events({ asset: 'batch_ready' });
      for (const job of jobs) expect(ready.filter((event) => event.runId === runOf(job)).map((event) => event.partitionKey)).toEqual(batches(job.id, 2));
      const tooLong = await queue.add('ingest', { batches: 1 }, { jobId: 'x'.repeat(190), attempts: 3 });
      await expect(tooLong.waitUntilFinished(events, 20_000)).rejects.toThrow('Give the job a shorter id');
      expect(await finalState(queue, tooLong.id!)).toMatchObject({ state: 'failed', attemptsMade: 1 });
    });

    it('keeps two BullMQ prefixes with one queue name apart: their jobs are runs of their own', { timeout: 30_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const dir = tempDir();
      const finished: Promise<unknown>[] = [];
      for (const prefix of ['tenantA', 'tenantB']) {
        const queue = new Queue(name, { connection: redisConnection, prefix });
        const events = new QueueEvents(name, { connection: redisConnection, prefix });
        await events.waitUntilReady();
        cleanups.push(async () => {
          await events.close();
          await queue.obliterate({ force: true });
          await queue.close();
        });
        worker(name, server, dir, { worker: { prefix } });
        const job = await queue.add('ingest', { batches: 3 }, { jobId: 'report' });
        finished.push(job.waitUntilFinished(events, 20_000));
      }
      expect(await Promise.all(finished)).toEqual([3, 3]);
      const ready = await server.events({ asset: 'batch_ready' });
      expect(ready.map((event) => event.workflow).sort()).toEqual([...Array(3).fill(`tenantA:${name}`), ...Array(3).fill(`tenantB:${name}`)]);
      expect(new Set(ready.map((event) => event.runId.split('@')[0])).size).toBe(2);
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(2);
    });

    it('refuses bad options when the worker is made, naming the option', () => {
      const good = { dir: tempDir(), server: 'http://127.0.0.1:1', worker: { connection: redisConnection, autorun: false } };
      const cases: [Record<string, unknown>, string][] = [
        [{ ...good, dir: undefined }, 'dir'],
        [{ ...good, dir: 42 }, 'dir'],
        [{ ...good, server: undefined }, 'server'],
        [{ ...good, server: 'localhost:8787' }, 'server'],
        [{ ...good, willRetry: true }, 'willRetry'],
        [{ ...good, worker: {} }, 'worker'],
        [{ ...good, colour: 'blue' }, 'colour'],
      ];
      for (const [options, field] of cases) {
        expect(() => onceboxWorker('q', batchLoop(), options as never), field).toThrow(expect.objectContaining({ code: 'invalid_option', field }));
      }
    });

    it("takes BullMQ's rule, and says so once, when a willRetry option throws", { timeout: 30_000 }, async () => {
      const server = await startServer();
      const name = queueName();
      const { queue, events } = await newQueue(name);
      const logged: unknown[] = [];
      worker(name, server, tempDir(), {
        processor: async (job, box) => {
          await batchLoop()(job, box);
          throw new Error('source down');
        },
        oncebox: {
          willRetry: () => {
            throw new Error('bug in willRetry');
          },
          outbox: { logger: { info() {}, warn() {}, error: (fields: unknown) => logged.push(fields) } },
        },
      });
      const job = await queue.add('ingest', { batches: 1 }, { attempts: 2 });
      await expect(job.waitUntilFinished(events, 20_000)).rejects.toThrow('source down');
      const failures = (await server.events({ asset: LifecycleAsset.Failed })).map((event) => (event.extra as { willRetry: boolean }).willRetry);
      expect(failures).toEqual([true, false]);
      expect(logged.filter((fields) => (fields as { field?: string }).field === 'willRetry')).toHaveLength(1);
    });
  });
});
