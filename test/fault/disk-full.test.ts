import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openOutbox } from '../../src/outbox/index.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { startServer } from '../support/server.js';

/**
 * A real full disk: the outbox lives on a small tmpfs, and the test fills it. Mounting needs root; where
 * the machine does not allow it the test skips and says so (under CI=true it fails).
 */
const mountPoint = mkdtempSync(join(tmpdir(), 'oncebox-tmpfs-'));
const mountProblem = (() => {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mountPoint], { stdio: 'pipe' });
    return undefined;
  } catch (error) {
    return String((error as { stderr?: Buffer }).stderr ?? error).trim();
  }
})();
if (mountProblem !== undefined && process.env.CI === 'true') throw new Error(`a tmpfs is required under CI=true: ${mountProblem}`);
if (mountProblem !== undefined) console.warn(`disk-full test skipped: cannot mount a tmpfs (${mountProblem})`);

afterAll(() => {
  // Lazily: a failed test may leave the outbox open, and the mount must go all the same.
  if (mountProblem === undefined) execFileSync('umount', ['-l', mountPoint]);
  rmSync(mountPoint, { recursive: true, force: true });
});

/** Fills the file system with one file until it is full; returns a function that frees the space. */
function fillDisk(): () => void {
  const filler = join(mountPoint, 'filler');
  const fd = openSync(filler, 'w');
  const chunk = Buffer.alloc(64 * 1024, 1);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
  }
  // The last bytes a smaller write can take.
  try {
    for (;;) writeSync(fd, Buffer.alloc(512, 1));
  } catch {
    // full
  }
  closeSync(fd);
  return () => rmSync(filler);
}

describe.skipIf(mountProblem !== undefined)(`a full disk under the outbox${mountProblem === undefined ? '' : ' (skipped: no tmpfs)'}`, () => {
  it('does not stop the relay: once space is freed it delivers every commit once', async () => {
    const server = await startServer();
    const proxy = await startFaultProxy(server.url);
    const box = await openOutbox({
      path: join(mountPoint, 'outbox.db'),
      server: proxy.url,
      producer: 'p',
      run: { workflow: 'w', runId: 'disk-full', attempt: 1 },
      retryMinDelayMs: 20,
      retryMaxDelayMs: 100,
      durability: 'normal',
    });
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    const ready = box.asset('batch_ready');
    // The server is unreachable while the job commits: everything stays pending.
    proxy.plan(...Array.from({ length: 1000 }, () => 'fail-503' as const));
    for (let batch = 1; batch <= 30; batch++) {
      box.commit((tx) => {
        tx.set(progress, { batch });
        tx.emit(ready, { partitionKey: `batch-${batch}`, extra: { rows: batch } });
      });
    }
    const freeSpace = fillDisk();
    proxy.clearPlan(); // the server answers now, but the relay cannot record what it says
    await expect.poll(() => box.status().lastError?.code, { timeout: 60_000 }).toBe('local_storage');
    expect(box.relay!.failure).toBeUndefined();
    expect((await server.events()).length).toBeGreaterThan(0);

    // The job's commits on the full disk: one soon finds no room (the first may fit in the WAL's free
    // pages), and throws a typed error naming the fix, having written nothing.
    const commitMore = () => {
      for (let batch = 31; batch <= 200; batch++) {
        box.commit((tx) => {
          tx.set(progress, { batch });
          tx.emit(ready, { partitionKey: `extra-${batch}`, extra: { padding: 'x'.repeat(16_000) } });
        });
      }
    };
    expect(commitMore).toThrow(expect.objectContaining({ name: 'OutboxWriteError', code: 'outbox_write_failed', sqliteCode: 'SQLITE_FULL' }));
    const written = progress.get()!.batch;

    freeSpace();
    // Committed again once there is room, from the last checkpoint written.
    box.commit((tx) => {
      tx.set(progress, { batch: written + 1 });
      tx.emit(ready, { partitionKey: `extra-${written + 1}` });
    });
    await expect.poll(() => box.status().pending, { timeout: 60_000 }).toBe(0);
    expect(box.relay!.failure).toBeUndefined();
    // Each commit that was written, once and in order; nothing of the one that failed.
    const extras = Array.from({ length: written + 1 - 30 }, (_, i) => `extra-${31 + i}`);
    expect((await server.events()).map((event) => event.partitionKey)).toEqual([...Array.from({ length: 30 }, (_, i) => `batch-${i + 1}`), ...extras]);
    expect(await box.close()).toMatchObject({ pending: 0, dead: 0 });
  }, 180_000);
});
