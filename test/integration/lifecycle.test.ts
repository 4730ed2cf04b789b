import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openNotifiers } from '../../src/consumer/index.js';
import { FencedError, LifecycleAsset, openOutbox, RunEndedError, type Outbox } from '../../src/outbox/index.js';
import { startFaultProxy } from '../../src/testing/fault-proxy.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet = { info() {}, warn() {}, error() {} };
const RUN = { workflow: 'orders', runId: '2026-12-01', task: 'ingest' };

function open(server: RunningServer, path: string, attempt: number, extra: Record<string, unknown> = {}): Promise<Outbox> {
  return openOutbox({ path, server: server.url, producer: 'orders-ingest', run: { ...RUN, attempt }, logger: quiet, ...extra });
}

/** One batch of the job: its checkpoint, an event now, and an event held for the run's success. */
function batch(box: Outbox, n: number): void {
  box.commit((tx) => {
    tx.set(box.checkpoint('backlog', z.object({ batch: z.number() })), { batch: n });
    tx.emit(box.asset('batch_ready'), { partitionKey: `batch-${n}` });
    tx.emit(box.asset('run_done'), { partitionKey: `batch-${n}`, on: 'success' });
  });
}

const partitionsOf = async (server: RunningServer, asset: string) => (await server.events({ asset })).map((event) => event.partitionKey);

describe('terminal commits', () => {
  it('release the emissions held for success once, with one success event, in one transaction', async () => {
    const server = await startServer();
    const box = await open(server, join(tempDir(), 'job.db'), 1);
    batch(box, 1);
    batch(box, 2);
    expect(box.status()).toMatchObject({ held: 2, discarded: 0 });
    const ended = box.complete((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'summary' }));
    expect(ended).toMatchObject({ outcome: 'succeeded', recorded: true });
    expect(box.status()).toMatchObject({ held: 0, discarded: 0 });
    const receipt = await ended.event!.receipt();
    expect(receipt.duplicate).toBe(false);
    await box.close();
    expect(await partitionsOf(server, 'batch_ready')).toEqual(['batch-1', 'batch-2', 'summary']);
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2']);
    const [success, ...more] = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(more).toEqual([]);
    expect(success).toMatchObject({ producer: 'orders-ingest', runId: RUN.runId, attempt: 1, extra: { outcome: 'succeeded', workflow: 'orders', runId: RUN.runId, task: 'ingest' } });
  });

  it('discard the held emissions on failure, visibly, with one failure event per attempt however often fail is called', async () => {
    const server = await startServer();
    const box = await open(server, join(tempDir(), 'job.db'), 1);
    batch(box, 1);
    const first = box.fail(new RangeError('disk full'), (tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'failed-at-batch-2' }));
    expect(first).toMatchObject({ outcome: 'failed', recorded: true });
    // The failure callback runs again (a retry of the callback, a second handler): nothing more is recorded.
    const second = box.fail(new Error('another message'), () => {
      throw new Error('not run');
    });
    expect(second).toMatchObject({ outcome: 'failed', recorded: false, event: undefined });
    expect(box.status()).toMatchObject({ held: 0, discarded: 1 });
    expect(() => box.complete()).toThrow(RunEndedError);
    expect(() => batch(box, 2)).toThrow(expect.objectContaining({ code: 'run_ended' }));
    await first.event!.receipt();
    await box.close();
    expect(await partitionsOf(server, 'run_done')).toEqual([]);
    expect(await partitionsOf(server, 'batch_ready')).toEqual(['batch-1', 'failed-at-batch-2']);
    const failures = await server.events({ asset: LifecycleAsset.Failed });
    expect(failures.map((event) => event.extra)).toEqual([
      { outcome: 'failed', workflow: 'orders', runId: RUN.runId, task: 'ingest', attempt: 1, error: { message: 'disk full' }, willRetry: false, held: 1 },
    ]);
  });

  it('keep the held emissions for the retry when a failure says one is to come, and release them once', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'job.db');
    const first = await open(server, path, 1);
    batch(first, 1);
    batch(first, 2);
    expect(first.fail(new Error('timeout'), undefined, { willRetry: true })).toMatchObject({ recorded: true });
    expect(first.status()).toMatchObject({ held: 2, discarded: 0 });
    await first.close();
    // The retry resumes after batch 2 and holds nothing itself: it releases what attempt 1 held.
    const second = await open(server, path, 2);
    second.complete();
    await second.close();
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2']);
    expect((await server.events({ asset: LifecycleAsset.Failed }))[0]!.extra).toMatchObject({ willRetry: true, held: 2 });
  });

  it('release exactly one copy when a retry succeeds: after a failed attempt, and after one that died holding', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'job.db');
    const first = await open(server, path, 1);
    batch(first, 1);
    first.fail(new Error('flaky source'));
    await first.close();
    const second = await open(server, path, 2);
    batch(second, 1);
    batch(second, 2);
    // Attempt 2 dies holding (no terminal commit); attempt 3 holds the same emissions again and succeeds.
    await second.close();
    const third = await open(server, path, 3);
    batch(third, 1);
    batch(third, 2);
    // Attempt 1's failure (for good) discarded batch-1's; attempt 2, the run tried after all, held it
    // again: 1 + 2 + 2 held rows, which the release makes one event per key.
    expect(third.status().held).toBe(5);
    third.complete();
    await third.close();
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2']);
    expect((await server.events({ asset: LifecycleAsset.Failed })).map((event) => event.attempt)).toEqual([1]);
    expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
  });

  for (const where of ['the same file', 'a fresh machine'] as const) {
    it(`release what a failure for good discarded when the run is tried again after all and succeeds (${where})`, async () => {
      const server = await startServer();
      const path = join(tempDir(), 'job.db');
      const first = await open(server, path, 1);
      batch(first, 1);
      batch(first, 2);
      first.fail(new Error('the source is down'));
      expect(first.status().discarded).toBe(2);
      await first.close();
      // Someone retries the failed run (a BullMQ job.retry(), an Airflow task cleared): it resumes past
      // batch 2, and holds batches 1 and 2 again without committing them.
      const retry = await open(server, where === 'the same file' ? path : join(tempDir(), 'fresh.db'), 2);
      expect(retry.status()).toMatchObject({ held: 2, discarded: 0 });
      batch(retry, 3);
      retry.complete();
      await retry.close();
      expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2', 'batch-3']);
      expect((await server.events({ asset: LifecycleAsset.Failed })).map((event) => (event.extra as { willRetry: boolean }).willRetry)).toEqual([false]);
      expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
    });
  }

  it('give a retry on a fresh machine the emissions the lost file held, so that its complete releases them', async () => {
    const server = await startServer();
    const lost = await open(server, join(tempDir(), 'lost.db'), 1);
    batch(lost, 1);
    batch(lost, 2);
    // Delivered, checkpoints and the mirror of what it holds included; then the machine is gone.
    await lost.close();
    const retry = await open(server, join(tempDir(), 'fresh.db'), 2);
    expect(retry.checkpoint('backlog', z.object({ batch: z.number() })).get()).toEqual({ batch: 2 });
    expect(retry.status().held).toBe(2);
    batch(retry, 3);
    retry.complete();
    await retry.close();
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2', 'batch-3']);
    expect(await partitionsOf(server, 'batch_ready')).toEqual(['batch-1', 'batch-2', 'batch-3']);
  });

  it("give a retry on a fresh machine what a commit held, wherever the relay cut the commit's rows into requests", async () => {
    const server = await startServer();
    // The machine is lost after the first request of the job's relay reached the server: two rows a
    // request cut the batch's commit (its event, then its checkpoint updates) in two.
    let posts = 0;
    const proxy = await startFaultProxy(server.url, { choose: ({ method, url }) => (method === 'POST' && url.startsWith('/v1/emissions') && ++posts > 1 ? 'drop-request' : 'forward') });
    try {
      const lost = await openOutbox({ path: join(tempDir(), 'lost.db'), server: proxy.url, producer: 'orders-ingest', run: { ...RUN, attempt: 1 }, logger: quiet, batchMaxRows: 2, maxInFlight: 1 });
      batch(lost, 1);
      while ((await partitionsOf(server, 'batch_ready')).length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      await lost.close({ timeoutMs: 0 });
      // The retry resumes where the server's copy of the checkpoint says, and does the rest of the work.
      const retry = await open(server, join(tempDir(), 'fresh.db'), 2);
      const done = retry.checkpoint('backlog', z.object({ batch: z.number() })).get()?.batch ?? 0;
      for (let n = done + 1; n <= 2; n++) batch(retry, n);
      retry.complete();
      await retry.close();
      expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2']);
      expect(await partitionsOf(server, 'batch_ready')).toEqual(['batch-1', 'batch-2']);
    } finally {
      await proxy.close();
    }
  });

  it('record a failure whatever the error holds: a code too long, a NUL, half an emoji where the message is cut', async () => {
    const server = await startServer();
    const box = await open(server, join(tempDir(), 'job.db'), 1);
    batch(box, 1);
    const error = Object.assign(new Error(`${'m'.repeat(999)}\u{1F600}tail`), { code: `E_${'x'.repeat(300)}` });
    const nul = Object.assign(new Error('bad\u0000byte \uD800 alone'), { code: 'E\u0000' });
    const first = box.fail(error, undefined, { willRetry: true });
    await first.event!.receipt();
    await box.close();
    const second = await open(server, join(tempDir(), 'other.db'), 2);
    await second.fail(nul).event!.receipt();
    await second.close();
    const failures = (await server.events({ asset: LifecycleAsset.Failed })).map((event) => (event.extra as { error: { message: string; code: string } }).error);
    // Cut at 1000 characters without splitting the emoji's surrogate pair; the code at 200.
    expect(failures[0]).toEqual({ message: 'm'.repeat(999), code: `E_${'x'.repeat(198)}` });
    expect(failures[1]).toEqual({ message: 'bad\uFFFDbyte \uFFFD alone', code: 'E\uFFFD' });
    expect(await server.refusedNotices()).toEqual([]);
  });

  it('refuse to hold more than the server can mirror, and commit nothing of it', async () => {
    const server = await startServer();
    const box = await open(server, join(tempDir(), 'job.db'), 1);
    const big = { blob: 'x'.repeat(25_000) };
    box.commit((tx) => tx.emit(box.asset('run_done'), { partitionKey: 'a', extra: big, on: 'success' }));
    box.commit((tx) => tx.emit(box.asset('run_done'), { partitionKey: 'b', extra: big, on: 'success' }));
    expect(() => box.commit((tx) => {
      tx.emit(box.asset('batch_ready'), { partitionKey: 'c' });
      tx.emit(box.asset('run_done'), { partitionKey: 'c', extra: big, on: 'success' });
    })).toThrow(expect.objectContaining({ code: 'invalid_emission', field: 'on', message: expect.stringContaining('complete the run in parts') }));
    expect(box.status()).toMatchObject({ held: 2, pending: 0 });
    await box.close();
  });

  it('count a run success once: a retry on a fresh machine that succeeds again gets the first success back', async () => {
    const server = await startServer();
    const first = await open(server, join(tempDir(), 'a.db'), 1);
    batch(first, 1);
    const firstSuccess = await first.complete().event!.receipt();
    await first.close();
    const second = await open(server, join(tempDir(), 'b.db'), 2, { resume: 'never' });
    batch(second, 1);
    const again = await second.complete().event!.receipt();
    await second.close();
    expect(again).toMatchObject({ duplicate: true, eventId: firstSuccess.eventId });
    expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1']);
  });

  it("refuse a fenced attempt's complete: at once on a shared file, and at the server from another machine", async () => {
    const server = await startServer();
    const path = join(tempDir(), 'job.db');
    const zombie = await open(server, path, 1);
    batch(zombie, 1);
    const successor = await open(server, path, 2);
    expect(() => zombie.complete()).toThrow(FencedError);
    await zombie.close({ timeoutMs: 0 });

    const elsewhere = await open(server, join(tempDir(), 'other.db'), 1, { resume: 'never' });
    batch(successor, 1);
    successor.complete();
    await successor.close();
    // The other machine's attempt 1 does not know yet: its commit is local, and the server fences it.
    const late = elsewhere.complete();
    await expect(late.event!.receipt()).rejects.toThrow(FencedError);
    await elsewhere.close({ timeoutMs: 0 });
    const successes = await server.events({ asset: LifecycleAsset.Succeeded });
    expect(successes.map((event) => event.attempt)).toEqual([2]);
  });

  it('note an attempt that never ended when its successor opens the file, once, and tell the notifiers', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'job.db');
    const cut = await open(server, path, 1, { noteFenced: true });
    batch(cut, 1);
    await cut.close();
    const second = await open(server, path, 2, { noteFenced: true });
    batch(second, 2);
    second.fail(new Error('bad row'), undefined, { willRetry: true });
    await second.close();
    // Attempt 2 ended (it failed): attempt 3 notes no fence for it.
    const third = await open(server, path, 3, { noteFenced: true });
    third.complete();
    await third.close();
    const fences = await server.events({ asset: LifecycleAsset.Fenced });
    expect(fences.map((event) => [event.attempt, event.extra])).toEqual([[2, { outcome: 'fenced', workflow: 'orders', runId: RUN.runId, task: 'ingest', attempt: 1, fencedBy: 2 }]]);

    const told: string[] = [];
    const notifiers = await openNotifiers({
      path: join(tempDir(), 'notifiers.db'),
      server: server.url,
      waitSeconds: 1,
      logger: quiet,
      notifiers: [
        {
          onSuccess: (notice) => void told.push(`succeeded ${notice.attempt}`),
          onFailure: (notice) => void told.push(`failed ${notice.attempt}${notice.willRetry ? ', retrying' : ''}`),
          onFenced: (notice) => void told.push(`fenced ${notice.attempt} by ${notice.fencedBy}`),
        },
      ],
    });
    const stop = new AbortController();
    const running = notifiers.run({ signal: stop.signal });
    while (told.length < 3) await new Promise((resolve) => setTimeout(resolve, 20));
    stop.abort();
    await running;
    await notifiers.close();
    expect(told).toEqual(['fenced 1 by 2', 'failed 2, retrying', 'succeeded 3']);
  });

  it('refuses an unknown value of on, naming the field', async () => {
    const server = await startServer();
    const box = await open(server, join(tempDir(), 'job.db'), 1);
    expect(() => box.commit((tx) => tx.emit(box.asset('run_done'), { on: 'failure' as never }))).toThrow(
      expect.objectContaining({ code: 'invalid_emission', field: 'on', message: expect.stringContaining("on: must be 'success'") }),
    );
    await box.close();
  });
});
