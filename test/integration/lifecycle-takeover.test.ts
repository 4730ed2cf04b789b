import Database from 'better-sqlite3';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openOutbox, type CloseResult, type LifecycleExtra, type Outbox } from '../../src/outbox/index.js';
import type { StreamDetail } from '../../src/protocol/catalog.js';
import { runScript } from '../support/child.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * G25 where it meets G12: a lifecycle notice (`oncebox.run_*`) committed by one attempt and delivered by
 * a later one that took the file over on the same machine keeps the attempt it was committed with, is
 * stored once, and is refused by nobody. Attempt 1 (and, on the fence path, attempt 2) commits with its
 * relay off, as a process SIGKILLed right after its commit would leave the file; the next attempt opens
 * the same file and delivers; then its own retry runs on the same file or on a fresh machine.
 */

const quiet = { info() {}, warn() {}, error() {} };
const RUN = { workflow: 'orders', runId: 'rB', task: 't' };
const backlog = z.object({ batch: z.number() });

function open(server: RunningServer, path: string, attempt: number, extra: Record<string, unknown> = {}): Promise<Outbox> {
  return openOutbox({ path, server: server.url, producer: 'orders-ingest', run: { ...RUN, attempt }, logger: quiet, ...extra });
}

/** One batch: its checkpoint, an event now, and an event held for the run's success. */
function batch(box: Outbox, n: number): void {
  box.commit((tx) => {
    tx.set(box.checkpoint('backlog', backlog), { batch: n });
    tx.emit(box.asset('batch_ready'), { partitionKey: `batch-${n}` });
    tx.emit(box.asset('run_done'), { partitionKey: `batch-${n}`, on: 'success' });
  });
}

/** A notice as the server stored it: which outcome, of which attempt, by which, and with what retry. */
type Notice = [outcome: string, attempt: number | undefined, detail?: number | boolean];

async function noticesOf(server: RunningServer): Promise<Notice[]> {
  const events = (await server.events()).filter((event) => event.asset.startsWith('oncebox.run_'));
  return events.map((event) => {
    const extra = event.extra as unknown as LifecycleExtra;
    if (extra.outcome === 'failed') return ['failed', extra.attempt, extra.willRetry];
    if (extra.outcome === 'fenced') return ['fenced', extra.attempt, extra.fencedBy];
    return ['succeeded', undefined];
  });
}

interface Path {
  /** Attempts 1.. commit and end (or die) with their relay off; returns the attempt that takes the file over. */
  leave(server: RunningServer, path: string): Promise<number>;
  /** Whether the attempt that takes over goes on working and fails (the run has not succeeded) or ends the run as it ended. */
  goesOn: boolean;
  /** The notices on the server at the end, in order. */
  notices: (taker: number) => Notice[];
}

const PATHS: Record<string, Path> = {
  'run_failed with a retry to come': {
    async leave(server, path) {
      const first = await open(server, path, 1, { relay: 'external' });
      batch(first, 1);
      expect(first.fail(new Error('attempt 1 failed'), undefined, { willRetry: true })).toMatchObject({ recorded: true });
      await first.close({ timeoutMs: 0 });
      return 2;
    },
    goesOn: true,
    notices: () => [['failed', 1, true], ['failed', 2, true], ['succeeded', undefined]],
  },
  'run_failed for good': {
    async leave(server, path) {
      const first = await open(server, path, 1, { relay: 'external' });
      batch(first, 1);
      first.fail(new Error('attempt 1 failed'));
      await first.close({ timeoutMs: 0 });
      return 2;
    },
    goesOn: true,
    notices: () => [['failed', 1, false], ['failed', 2, true], ['succeeded', undefined]],
  },
  run_fenced: {
    async leave(server, path) {
      // Attempt 1 dies without ending; attempt 2 notes its fence, commits a batch and dies in turn.
      const first = await open(server, path, 1, { relay: 'external' });
      batch(first, 1);
      await first.close({ timeoutMs: 0 });
      const second = await open(server, path, 2, { relay: 'external', noteFenced: true });
      batch(second, 2);
      await second.close({ timeoutMs: 0 });
      return 3;
    },
    goesOn: true,
    // Attempt 3 delivers the fence of 1 by 2 it took over, and notes the fence of 2 by itself.
    notices: () => [['fenced', 1, 2], ['fenced', 2, 3], ['failed', 3, true], ['succeeded', undefined]],
  },
  run_succeeded: {
    async leave(server, path) {
      const first = await open(server, path, 1, { relay: 'external' });
      batch(first, 1);
      first.complete();
      await first.close({ timeoutMs: 0 });
      return 2;
    },
    goesOn: false,
    notices: () => [['succeeded', undefined]],
  },
};

const deadOf = (status: CloseResult) => ({ dead: status.dead, deadRows: status.deadRows });

describe.each(Object.entries(PATHS))('a lifecycle notice taken over on the same file: %s', (_name, path) => {
  for (const where of ['the same file', 'a fresh machine'] as const) {
    it(`is stored once with the attempt it was committed with, refused by nobody; then a retry on ${where} ends the run`, async () => {
      const server = await startServer();
      const file = join(tempDir(), 'B.db');
      const taker = await path.leave(server, file);
      const takeover = await open(server, file, taker, { noteFenced: true });
      const committed = path.goesOn ? taker : 1;
      if (path.goesOn) {
        batch(takeover, taker);
        takeover.fail(new Error(`attempt ${taker} failed`), undefined, { willRetry: true });
      } else {
        // A runner that hands the run out again after its success ends it the same way (the BullMQ adapter does).
        takeover.complete();
      }
      expect(deadOf(await takeover.close())).toEqual({ dead: 0, deadRows: [] });

      const retryFile = where === 'the same file' ? file : join(tempDir(), 'fresh.db');
      const retry = await open(server, retryFile, taker + 1, { noteFenced: true });
      expect(retry.checkpoint('backlog', backlog).get()).toEqual({ batch: committed });
      retry.complete();
      expect(deadOf(await retry.close())).toEqual({ dead: 0, deadRows: [] });

      expect(await noticesOf(server)).toEqual(path.notices(taker));
      expect(await server.refusedNotices()).toEqual([]);
      const partitions = async (asset: string) => (await server.events({ asset })).map((event) => event.partitionKey);
      const all = Array.from({ length: committed }, (_, i) => `batch-${i + 1}`);
      expect(await partitions('batch_ready')).toEqual(all);
      expect(await partitions('run_done')).toEqual(all);
    });
  }
});

describe('a lifecycle notice taken over', () => {
  it("gives the run the outcome its newest attempt said, whichever attempt delivered it", async () => {
    const server = await startServer();
    const file = join(tempDir(), 'B.db');
    const outcome = async () => {
      const stream = (await (await fetch(`${server.url}/v1/catalog/streams/orders-ingest/rB?task=t`)).json()) as StreamDetail;
      return { outcome: stream.outcome, willRetry: stream.willRetry, notices: stream.lifecycle.map((event) => (event.extra as unknown as LifecycleExtra).attempt) };
    };
    // Attempt 1 failed for good; attempt 2 delivers that failure: the run failed, as if attempt 1 had sent it.
    await PATHS['run_failed for good']!.leave(server, file);
    const second = await open(server, file, 2);
    batch(second, 2);
    await second.close();
    expect(await outcome()).toEqual({ outcome: 'failed', willRetry: false, notices: [1] });
    // Attempt 2, tried after all, fails with a retry to come: its word stands.
    const again = await open(server, file, 2);
    again.fail(new Error('attempt 2 failed'), undefined, { willRetry: true });
    await again.close();
    expect(await outcome()).toEqual({ outcome: 'running', willRetry: true, notices: [1, 2] });
  });

  it('is kept, and delivered first, when the retry adopts a later attempt of another machine (resume: server-newer)', async () => {
    const server = await startServer();
    const machineA = join(tempDir(), 'A.db');
    // Attempt 1 fails on machine A and dies before delivering; attempt 2 runs on machine B and dies.
    await PATHS['run_failed with a retry to come']!.leave(server, machineA);
    const second = await open(server, join(tempDir(), 'B.db'), 2);
    batch(second, 1);
    batch(second, 2);
    await second.close();
    // Attempt 3 lands on machine A again: it drops what attempt 1 had not delivered, since attempt 2 got
    // further, but not the failure of attempt 1, a fact no resume does again.
    const third = await open(server, machineA, 3, { resume: 'server-newer' });
    expect(third.checkpoint('backlog', backlog).get()).toEqual({ batch: 2 });
    third.complete();
    expect(deadOf(await third.close())).toEqual({ dead: 0, deadRows: [] });
    expect(await noticesOf(server)).toEqual([['failed', 1, true], ['succeeded', undefined]]);
    expect(await server.refusedNotices()).toEqual([]);
    expect((await server.events({ asset: 'batch_ready' })).map((event) => event.partitionKey)).toEqual(['batch-1', 'batch-2']);
  });
});

describe('a notice a server refused for its content', () => {
  it('is taken over by no attempt and stays dead at dead retry, which says why and names the discard', async () => {
    const server = await startServer();
    const file = join(tempDir(), 'B.db');
    await PATHS['run_failed with a retry to come']!.leave(server, file);
    // As an older producer could have written it, with an error code longer than the server takes, and
    // as its relay parked it once the server refused it.
    const db = new Database(file);
    const { id, extra } = db.prepare("SELECT id, extra FROM outbox WHERE asset = 'oncebox.run_failed'").get() as { id: number; extra: string };
    const long = { ...JSON.parse(extra), error: { message: 'boom', code: 'E'.repeat(300) } };
    db.prepare("UPDATE outbox SET extra = ?, state = 'dead', dead_code = 'invalid_item', dead_reason = 'extra.error.code: too long' WHERE id = ?").run(JSON.stringify(long), id);
    db.close();
    const second = await open(server, file, 2);
    batch(second, 2);
    // Still attempt 1's dead row: no attempt sends it into the same refusal again.
    expect((await second.close()).deadRows).toEqual([expect.objectContaining({ id, code: 'invalid_item' })]);
    const retried = await runScript('src/cli/main.ts', ['dead', 'retry', file, '--all']);
    expect(retried.code).toBe(3);
    expect(retried.lines[0]).toEqual({ text: expect.stringContaining(`row ${id} stays dead: The server refuses its content, and would again`) });
    expect(await server.refusedNotices()).toEqual([]);
  });
});

/**
 * Files made by oncebox 0.1.0 (775f75e), whose server refused these notices and whose relay parked them
 * dead: test/fixtures/lifecycle-takeover/make.ts says how. The fixed version brings them to the server.
 */
describe('a notice the 0.1.0 server refused after a takeover', () => {
  const fixture = (name: string) => {
    const copy = join(tempDir(), name);
    copyFileSync(join('test/fixtures/lifecycle-takeover', name), copy);
    return copy;
  };

  for (const [name, run, notice] of [
    ['failed.db', 'rB', ['failed', 1, true]],
    ['fenced.db', 'rF', ['fenced', 1, 2]],
  ] as const) {
    it(`${name}: oncebox dead retry sends it again and the server takes it, with its own attempt`, async () => {
      const server = await startServer({ db: fixture('server.db') });
      const file = fixture(name);
      // What the console and `oncebox ls rejections` say of the old refusal: send it again.
      const [refusal] = (await server.refusedNotices()).filter((rejection) => rejection.runId === run);
      expect(refusal!.fix).toMatch(/^Send it again: oncebox dead retry <outbox file> --all/);
      const retried = await runScript('src/cli/main.ts', ['dead', 'retry', file, '--all']);
      expect(retried.code, retried.stderr).toBe(0);
      expect(retried.lines[0]).toEqual({ text: expect.stringMatching(/^row 4 goes out again as row \d+/) });
      const drained = await runScript('src/cli/main.ts', ['relay', file, '--server', server.url, '--drain']);
      expect(drained.code, drained.stderr).toBe(0);
      expect(drained.lines.at(-1)).toEqual({ text: expect.stringContaining(', 0 pending, 0 dead') });
      const stored = (await server.events()).filter((event) => event.asset.startsWith('oncebox.run_') && event.runId === run);
      expect(stored.map((event) => (event.extra as unknown as LifecycleExtra).attempt)).toEqual([notice[1]]);
      expect(await noticesOf(server)).toEqual([notice]);
    });

    it(`${name}: the run's next attempt on the file takes it over and delivers it, with nothing to run by hand`, async () => {
      const server = await startServer({ db: fixture('server.db') });
      const file = fixture(name);
      const next = await openOutbox({
        path: file,
        server: server.url,
        producer: 'orders-ingest',
        run: { workflow: 'orders', runId: run, task: 't', attempt: name === 'failed.db' ? 3 : 4 },
        logger: quiet,
      });
      next.complete();
      expect(deadOf(await next.close())).toEqual({ dead: 0, deadRows: [] });
      const notices = await noticesOf(server);
      expect(notices).toEqual([notice, ['succeeded', undefined]]);
    });
  }
});
