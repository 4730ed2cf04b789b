import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LifecycleAsset, openNotifiers, webhookNotifier } from '../../src/consumer/index.js';
import { runScript } from '../support/child.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const JOB = 'examples/lifecycle-job.ts';
const BATCHES = 4;

function job(server: RunningServer, db: string, attempt: number, extra: string[] = [], env: Record<string, string> = {}) {
  return runScript(JOB, ['--db', db, '--server', server.url, '--attempt', String(attempt), '--batches', String(BATCHES), ...extra], { env, timeoutMs: 60_000 });
}

const partitionsOf = async (server: RunningServer, asset: string) => (await server.events({ asset })).map((event) => event.partitionKey);

interface Received {
  key: string | undefined;
  body: { outcome: string; attempt: number; error?: { message: string } };
}

const hooks: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of hooks.splice(0)) await close();
});

/** A webhook receiver on loopback that records what it gets; it answers 503 to the first `failFirst` notices. */
async function webhook(failFirst = 0): Promise<{ url: string; received: Received[] }> {
  const received: Received[] = [];
  let refused = 0;
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (refused < failFirst) {
        refused++;
        res.writeHead(503).end();
        return;
      }
      received.push({ key: req.headers['idempotency-key'] as string | undefined, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  hooks.push(() => new Promise((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, received };
}

describe('terminal commits through crashes', () => {
  it('SIGKILLed inside complete, then retried: one success event, and the held events released once', async () => {
    const server = await startServer();
    const db = join(tempDir(), 'job.db');
    // The terminal commit is the job's 5th: killed with its rows written and not committed.
    const killed = await job(server, db, 1, [], { ONCEBOX_FAILPOINT: `commit:after-write@${BATCHES + 1}` });
    expect(killed.signal).toBe('SIGKILL');
    const retry = await job(server, db, 2);
    expect(retry.code, retry.stderr).toBe(0);
    expect(retry.lines[0]).toMatchObject({ event: 'start', resumeFrom: BATCHES, held: BATCHES });
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2', 'batch-3', 'batch-4']);
    expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
    expect(await server.refusedNotices()).toEqual([]);
  });

  it('SIGKILLed after complete committed, retried on a fresh file: still one success event and one copy of each', async () => {
    const server = await startServer();
    const killed = await job(server, join(tempDir(), 'lost.db'), 1, [], { ONCEBOX_FAILPOINT: `commit:after-commit@${BATCHES + 1}` });
    expect(killed.signal).toBe('SIGKILL');
    const retry = await job(server, join(tempDir(), 'fresh.db'), 2);
    expect(retry.code, retry.stderr).toBe(0);
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2', 'batch-3', 'batch-4']);
    expect(await partitionsOf(server, 'batch_ready')).toEqual(['batch-1', 'batch-2', 'batch-3', 'batch-4']);
    expect(await server.events({ asset: LifecycleAsset.Succeeded })).toHaveLength(1);
    expect(await server.refusedNotices()).toEqual([]);
  });

  for (const [ending, args, notices] of [
    ['complete', [], [['succeeded', 2]]],
    ['fail with a retry to come', ['--fail', '--will-retry'], [['failed', 1], ['succeeded', 2]]],
    ['fail for good', ['--fail'], [['failed', 1], ['succeeded', 2]]],
  ] as const) {
    it(`SIGKILLed after ${ending} committed, before its relay sent the notice, retried on the same file: the retry delivers it once, as attempt 1's`, async () => {
      const server = await startServer();
      const db = join(tempDir(), 'job.db');
      const killed = await job(server, db, 1, [...args], { ONCEBOX_FAILPOINT: `commit:after-commit@${BATCHES + 1}` });
      expect(killed.signal).toBe('SIGKILL');
      expect(await server.events({ asset: ending === 'complete' ? LifecycleAsset.Succeeded : LifecycleAsset.Failed })).toEqual([]);
      const retry = await job(server, db, 2);
      expect(retry.code, retry.stderr).toBe(0);
      expect(retry.lines.at(-1)).toEqual({ event: 'done', pending: 0, dead: 0 });
      const stored = (await server.events()).filter((event) => event.asset.startsWith('oncebox.run_'));
      // A success names no attempt (a run succeeds once, whichever attempt made it): the one that delivered it stands.
      expect(stored.map((event) => [(event.extra as { outcome: string }).outcome, (event.extra as { attempt?: number }).attempt ?? event.attempt])).toEqual(notices);
      expect(await server.refusedNotices()).toEqual([]);
      expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2', 'batch-3', 'batch-4']);
    });
  }

  it('SIGKILLed inside fail, with the failure callback run twice: one notice per attempt, each key received once', async () => {
    const server = await startServer();
    const db = join(tempDir(), 'job.db');
    const killed = await job(server, db, 1, ['--fail'], { ONCEBOX_FAILPOINT: `commit:after-write@${BATCHES + 1}` });
    expect(killed.signal).toBe('SIGKILL');
    const second = await job(server, db, 2, ['--fail', '--fail-twice', '--will-retry']);
    expect(second.code, second.stderr).toBe(0);
    expect(second.lines.find((line) => line.event === 'ended')).toMatchObject({ outcome: 'failed', recorded: true });
    const third = await job(server, db, 3);
    expect(third.code, third.stderr).toBe(0);

    // The receiver refuses the first two deliveries: the notifier sends them again, with the same key.
    const hook = await webhook(2);
    const notifiers = await openNotifiers({ path: join(tempDir(), 'notifiers.db'), server: server.url, waitSeconds: 1, notifiers: [webhookNotifier({ url: hook.url })] });
    const stop = new AbortController();
    const running = notifiers.run({ signal: stop.signal });
    while (hook.received.length < 2) await new Promise((resolve) => setTimeout(resolve, 50));
    await new Promise((resolve) => setTimeout(resolve, 500));
    stop.abort();
    await running;
    await notifiers.close();

    // Attempt 1 died inside fail: nothing of its failure was committed, so only attempt 2's failure is
    // notified (once, for both calls), then the run's success.
    expect(hook.received.map((notice) => [notice.body.outcome, notice.body.attempt])).toEqual([
      ['failed', 2],
      ['succeeded', 3],
    ]);
    expect(hook.received[0]!.body.error).toEqual({ message: 'source unavailable on attempt 2' });
    const events = [...(await server.events({ asset: LifecycleAsset.Failed })), ...(await server.events({ asset: LifecycleAsset.Succeeded }))];
    expect(hook.received.map((notice) => notice.key)).toEqual(events.map((event) => event.key));
    expect(new Set(hook.received.map((notice) => notice.key)).size).toBe(2);
    // Attempt 2 failed with a retry to come: what the run held stayed for attempt 3, which released one copy.
    expect(await partitionsOf(server, 'run_done')).toEqual(['batch-1', 'batch-2', 'batch-3', 'batch-4']);
    expect(await server.refusedNotices()).toEqual([]);
  });
});
