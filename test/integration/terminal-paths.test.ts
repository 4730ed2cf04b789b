import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { FencedError, LifecycleAsset, openOutbox, RunEndedError, type Outbox } from '../../src/outbox/index.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * G25 as a table: every way attempt 1 can end, each followed by a retry on the same file and on a fresh
 * machine that runs one more batch and succeeds. Whatever the path, the emissions held for success are
 * released exactly once, by the one success, and the failure events say what the path said.
 */

const quiet = { info() {}, warn() {}, error() {} };
const RUN = { workflow: 'orders', runId: '2026-12-01', task: 'ingest' };

function open(server: RunningServer, path: string, attempt: number): Promise<Outbox> {
  return openOutbox({ path, server: server.url, producer: 'orders-ingest', run: { ...RUN, attempt }, logger: quiet });
}

function batch(box: Outbox, n: number): void {
  box.commit((tx) => {
    tx.set(box.checkpoint('backlog', z.object({ batch: z.number() })), { batch: n });
    tx.emit(box.asset('batch_ready'), { partitionKey: `batch-${n}` });
    tx.emit(box.asset('run_done'), { partitionKey: `batch-${n}`, on: 'success' });
  });
}

interface Path {
  /** Ends attempt 1 (which ran batches 1 and 2); `retry` opens attempt 2, for a path that needs it first. */
  end(first: Outbox, retry: () => Promise<Outbox>): Promise<void>;
  /** The failure events' willRetry, in order. */
  failures: boolean[];
}

const PATHS: Record<string, Path> = {
  complete: {
    async end(first) {
      expect(first.complete()).toMatchObject({ outcome: 'succeeded', recorded: true });
    },
    failures: [],
  },
  'fail for good': {
    async end(first) {
      expect(first.fail(new Error('the source is down'))).toMatchObject({ recorded: true });
      expect(first.status()).toMatchObject({ held: 0, discarded: 2 });
    },
    failures: [false],
  },
  'fail with a retry to come': {
    async end(first) {
      expect(first.fail(new Error('timeout'), undefined, { willRetry: true })).toMatchObject({ recorded: true });
      expect(first.status()).toMatchObject({ held: 2, discarded: 0 });
    },
    failures: [true],
  },
  'fail with a retry to come, then a second terminal commit': {
    async end(first) {
      first.fail(new Error('timeout'), undefined, { willRetry: true });
      expect(() => first.complete()).toThrow(RunEndedError);
      expect(first.fail(new Error('again'))).toMatchObject({ recorded: false });
    },
    failures: [true],
  },
  'fenced by its retry before it ends': {
    async end(first, retry) {
      // Attempt 1 delivered all it committed, then stalled (a zombie); its retry starts meanwhile.
      await vi.waitFor(() => expect(first.status()).toMatchObject({ pending: 0, pendingCheckpoints: 0 }), { timeout: 60_000 });
      const successor = await retry();
      // The retry delivers first; then the zombie tries to end the run.
      batch(successor, 3);
      await successor.close();
      let refused: unknown;
      try {
        const late = first.complete();
        await late.event?.receipt();
      } catch (error) {
        refused = error;
      }
      expect(refused).toBeInstanceOf(FencedError);
    },
    failures: [],
  },
};

describe.each(Object.entries(PATHS))('attempt 1 ends: %s', (pathName, path) => {
  for (const where of ['the same file', 'a fresh machine'] as const) {
    it(`then a retry on ${where} succeeds: the held emissions are released exactly once`, async () => {
      const server = await startServer();
      const file = join(tempDir(), 'job.db');
      const retryFile = where === 'the same file' ? file : join(tempDir(), 'fresh.db');
      const first = await open(server, file, 1);
      batch(first, 1);
      batch(first, 2);
      let retryOpened = false;
      await path.end(first, async () => {
        retryOpened = true;
        return open(server, retryFile, 2);
      });
      await first.close({ timeoutMs: retryOpened ? 0 : 10_000 });
      const retry = await open(server, retryFile, retryOpened ? 3 : 2);
      // It resumes past what attempt 1 (and the fencing retry) delivered.
      expect(retry.checkpoint('backlog', z.object({ batch: z.number() })).get()).toEqual({ batch: retryOpened ? 3 : 2 });
      if (!retryOpened) batch(retry, 3);
      retry.complete();
      await retry.close();

      const partitions = async (asset: string) => (await server.events({ asset })).map((event) => event.partitionKey);
      expect({ path: pathName, where, held: await partitions('run_done') }).toEqual({ path: pathName, where, held: ['batch-1', 'batch-2', 'batch-3'] });
      expect(await partitions('batch_ready')).toEqual(['batch-1', 'batch-2', 'batch-3']);
      const successes = await server.events({ asset: LifecycleAsset.Succeeded });
      // A run succeeds once: a second success (after `complete`) gets the first one back.
      expect(successes).toHaveLength(1);
      const failures = await server.events({ asset: LifecycleAsset.Failed });
      expect(failures.map((event) => (event.extra as { willRetry: boolean }).willRetry)).toEqual(path.failures);
      // No notice refused: a zombie's is fenced, every other is taken (test/integration/lifecycle-takeover.test.ts
      // takes each path through a retry that delivers the notice its predecessor committed).
      expect(await server.refusedNotices()).toEqual([]);
    });
  }
});
