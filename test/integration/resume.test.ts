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
