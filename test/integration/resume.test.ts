import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openOutbox, ResumeUnavailableError, type OutboxOptions } from '../../src/outbox/index.js';
import { RUN } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const progressSchema = z.object({ batch: z.number() });

/** Runs an attempt that commits `batches` batches and waits until they are delivered. */
async function runAttempt(options: OutboxOptions, batches: number[]) {
  const box = await openOutbox(options);
  const progress = box.checkpoint('backlog', progressSchema);
  for (const batch of batches) {
    box.commit((tx) => {
      tx.set(progress, { batch });
      tx.emit(box.asset('batch_ready'), { partitionKey: `batch-${batch}` });
    });
  }
  expect(await box.close()).toMatchObject({ pending: 0, dead: 0 });
}

describe('resuming a retry from the server', () => {
  it('adopts the server copy on a fresh file, and only there by default', async () => {
    const { url } = await startServer();
    const dir = tempDir();
    const base = { server: url, producer: 'p', run: { ...RUN, attempt: 1 } };
    await runAttempt({ ...base, path: join(dir, 'a.db') }, [1, 2, 3]);

    const fresh = await openOutbox({ ...base, path: join(dir, 'b.db'), run: { ...RUN, attempt: 2 } });
    expect(fresh.checkpoint('backlog', progressSchema).get()).toEqual({ batch: 3 });
    expect(fresh.resumedFrom).toMatchObject({ epoch: 1, checkpoints: { backlog: { batch: 3 } } });
    await fresh.close();

    // resume: 'never' starts from the file's own (empty) state.
    const never = await openOutbox({ ...base, path: join(dir, 'c.db'), run: { ...RUN, attempt: 2 }, resume: 'never' });
    expect(never.checkpoint('backlog', progressSchema).get()).toBeUndefined();
    await never.close();
  });

  it("with resume: 'server-newer', also adopts it when another machine's attempt got further", async () => {
    const { url } = await startServer();
    const dir = tempDir();
    const base = { server: url, producer: 'p' };
    await runAttempt({ ...base, path: join(dir, 'machine-a.db'), run: { ...RUN, attempt: 1 } }, [1]);
    await runAttempt({ ...base, path: join(dir, 'machine-b.db'), run: { ...RUN, attempt: 2 } }, [2, 3]);

    const byDefault = await openOutbox({ ...base, path: join(dir, 'machine-a.db'), run: { ...RUN, attempt: 3 } });
    expect(byDefault.checkpoint('backlog', progressSchema).get()).toEqual({ batch: 1 });
    await byDefault.close();
    const newer = await openOutbox({ ...base, path: join(dir, 'machine-a.db'), run: { ...RUN, attempt: 3 }, resume: 'server-newer' });
    expect(newer.checkpoint('backlog', progressSchema).get()).toEqual({ batch: 3 });
    await newer.close();
  });

  it("with resume: 'server-newer', drops what its file had not delivered and holds what the server holds, once another machine got further", async () => {
    const { url } = await startServer();
    const dir = tempDir();
    const base = { server: url, producer: 'p' };
    const stale = join(dir, 'machine-a.db');
    // Machine A delivers batch 1, then commits batch 2 (holding an emission for the run's success) and
    // stops before its relay sends it.
    await runAttempt({ ...base, path: stale, run: { ...RUN, attempt: 1 } }, [1]);
    const unsent = await openOutbox({ ...base, path: stale, run: { ...RUN, attempt: 1 }, relay: 'manual' });
    unsent.commit((tx) => {
      tx.set(unsent.checkpoint('backlog', progressSchema), { batch: 2 });
      tx.set(unsent.checkpoint('only-here', progressSchema), { batch: 2 });
      tx.emit(unsent.asset('batch_ready'), { partitionKey: 'batch-2', key: '0199a5c2-0000-7000-8000-000000000002' });
      tx.emit(unsent.asset('run_done'), { partitionKey: 'from-a', on: 'success' });
    });
    await unsent.close({ timeoutMs: 0 });
    // Machine B resumes the run from the server (batch 1) and takes it to batch 3, holding its own.
    const b = await openOutbox({ ...base, path: join(dir, 'machine-b.db'), run: { ...RUN, attempt: 2 } });
    for (const batch of [2, 3]) {
      b.commit((tx) => {
        tx.set(b.checkpoint('backlog', progressSchema), { batch });
        tx.emit(b.asset('batch_ready'), { partitionKey: `batch-${batch}` });
      });
    }
    b.commit((tx) => tx.emit(b.asset('run_done'), { partitionKey: 'from-b', on: 'success' }));
    expect(await b.close()).toMatchObject({ pending: 0, dead: 0 });

    // Attempt 3 lands on machine A again: it goes on from batch 3, and A's batch 2 never goes out.
    const again = await openOutbox({ ...base, path: stale, run: { ...RUN, attempt: 3 }, resume: 'server-newer' });
    expect(again.checkpoint('backlog', progressSchema).get()).toEqual({ batch: 3 });
    expect(again.checkpoint('only-here', progressSchema).get()).toBeUndefined();
    expect(again.status()).toMatchObject({ pending: 0, pendingCheckpoints: 0, dead: 0 });
    again.complete();
    expect(await again.close()).toMatchObject({ pending: 0, dead: 0 });
    const server = await fetch(`${url}/v1/events?limit=100`).then((r) => r.json() as Promise<{ events: { asset: string; partitionKey: string; attempt: number }[] }>);
    const of = (asset: string) => server.events.filter((e) => e.asset === asset).map((e) => e.partitionKey);
    expect(of('batch_ready')).toEqual(['batch-1', 'batch-2', 'batch-3']);
    expect(server.events.find((e) => e.partitionKey === 'batch-2')?.attempt).toBe(2);
    expect(of('run_done')).toEqual(['from-b']);
  });

  it("with resume: 'server-newer', keeps its file's own progress when no other machine got further, also under a claimed attempt", async () => {
    const { url } = await startServer();
    const path = join(tempDir(), 'o.db');
    const base = { server: url, producer: 'p', path };
    await runAttempt({ ...base, run: { ...RUN, attempt: 1 } }, [1]);
    const unsent = await openOutbox({ ...base, run: { ...RUN, attempt: 1 }, relay: 'manual' });
    unsent.commit((tx) => tx.set(unsent.checkpoint('backlog', progressSchema), { batch: 2 }));
    await unsent.close({ timeoutMs: 0 });
    // 'claim' raises the epoch to the new attempt before the state is read: no reason to adopt it.
    const again = await openOutbox({ ...base, run: { ...RUN, attempt: 'claim' }, resume: 'server-newer' });
    expect(again.run?.attempt).toBe(2);
    expect(again.resumedFrom).toBeUndefined();
    expect(again.checkpoint('backlog', progressSchema).get()).toEqual({ batch: 2 });
    expect(await again.close()).toMatchObject({ pending: 0, dead: 0 });
  });

  it('starts from scratch when the server never heard of the run', async () => {
    const { url } = await startServer();
    const box = await openOutbox({ server: url, producer: 'p', path: join(tempDir(), 'o.db'), run: { ...RUN, attempt: 2 } });
    expect(box.resumedFrom).toBeUndefined();
    expect(box.checkpoint('backlog', progressSchema).get()).toBeUndefined();
    await box.close();
  });

  it('fails with ResumeUnavailableError rather than start over when the server cannot be reached', async () => {
    const path = join(tempDir(), 'o.db');
    const opening = openOutbox({ server: 'http://127.0.0.1:9', producer: 'p', path, run: { ...RUN, attempt: 2 }, resumeTimeoutMs: 300 });
    await expect(opening).rejects.toBeInstanceOf(ResumeUnavailableError);
    await expect(opening).rejects.toMatchObject({
      code: 'resume_unavailable',
      message: expect.stringMatching(
        /^attempt 2 of run 2026-11-30 could not read its stream state: no server answered within 300 ms \(http:\/\/127\.0\.0\.1:9\/v1\/streams\/p\/2026-11-30\?task=ingest: could not reach .*pass resume: 'never' to start from this file's own checkpoints$/,
      ),
    });
  });
});
