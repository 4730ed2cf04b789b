import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openConsumer } from '../../src/consumer/index.js';
import { CredentialsError, openOutbox } from '../../src/outbox/index.js';
import { REPO, runScript } from '../support/child.js';
import { allEvents, startServer, type RunningServer } from '../support/server.js';
import { quiet } from '../support/task-runs.js';
import { tempDir } from '../support/temp.js';

/**
 * A token the server refuses (none where one is required, an unknown one: 401; one outside its scope:
 * 403) is refused again however often it is sent: the relay, the consumer, every command and opening an
 * outbox stop at once, naming the fix, and lose nothing; the next run with a good token delivers it.
 */
const CLI = join(REPO, 'src/cli/main.ts');
const RUN = { workflow: 'orders', runId: '2026-11-30', task: 'ingest', attempt: 1 };
const progress = z.object({ batch: z.number() });

const ADMIN = 'admin-token-of-this-test';
/** What the server stored, read with its admin token. */
const stored = (server: RunningServer) => allEvents(server.url, {}, ADMIN);

/**
 * How many requests the server has refused with 401 or 403 (its own request counter): a client that
 * stops at once is refused once, where one that retried would be refused again and again. Counted rather
 * than timed, so that a slow machine cannot fail the test.
 */
async function refusals(server: RunningServer): Promise<number> {
  const metrics = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
  let refused = 0;
  for (const match of metrics.matchAll(/^oncebox_http_requests_total\{[^}]*status="40[13]"[^}]*\} (\d+)$/gm)) refused += Number(match[1]);
  return refused;
}

async function serverWithTokens(): Promise<{ server: RunningServer; job: string; other: string }> {
  const server = await startServer({ token: ADMIN });
  const job = (await server.server.store.tokens.create({ scope: 'publish', producers: 'orders-ingest', assets: ['batch_ready'] })).token;
  const other = (await server.server.store.tokens.create({ scope: 'publish', producers: 'payments', assets: ['batch_ready'] })).token;
  return { server, job, other };
}

/** A file with three batches committed and nothing delivered (written with the relay left to another process). */
async function committedFile(url: string): Promise<string> {
  const path = join(tempDir(), 'orders-ingest.db');
  const box = await openOutbox({ path, server: url, producer: 'orders-ingest', run: RUN, relay: 'external', logger: quiet });
  for (let batch = 1; batch <= 3; batch++) {
    box.commit((tx) => {
      tx.set(box.checkpoint('backlog', progress), { batch });
      tx.emit(box.asset('batch_ready'), { partitionKey: `batch-${batch}` });
    });
  }
  await box.close({ timeoutMs: 0 });
  return path;
}

describe('a refused token', () => {
  it.each([
    ['no token, where the server requires one', undefined, 401, 'the server requires a token and none was given'],
    ['an unknown token', `obx_${'0'.repeat(16)}_${'a'.repeat(43)}`, 401, 'the server does not know this token'],
    ["another producer's token", 'other', 403, 'the token is valid but does not cover this'],
  ] as const)('ends `oncebox relay --drain` refused once, with status 1 and the fix (%s), losing nothing', async (_case, given, status, fix) => {
    const { server, job, other } = await serverWithTokens();
    const path = await committedFile(server.url);
    const token = given === 'other' ? other : given;
    const relay = await runScript(CLI, ['relay', path, '--server', server.url, '--drain'], { env: token === undefined ? { ONCEBOX_TOKEN: '' } : { ONCEBOX_TOKEN: token }, timeoutMs: 30_000 });
    // Refused once, at its start, and never sent again (a relay that retried would not have exited).
    expect(await refusals(server)).toBe(1);
    expect(relay.code).toBe(1);
    expect(relay.stderr).toContain(`answered ${status}`);
    expect(relay.stderr).toContain(fix);
    expect(relay.stderr).toContain('set ONCEBOX_TOKEN');
    expect(relay.stderr).toContain(`[${status === 401 ? 'unauthorized' : 'forbidden'}]`);
    // Said once, not once a second.
    expect(relay.stderr.split(fix).length - 1).toBeLessThanOrEqual(2);
    expect(await stored(server)).toEqual([]);
    // A monitor running `oncebox status` is told that delivery stopped (4), ahead of a pending age it set.
    const stopped = await runScript(CLI, ['status', path, '--max-pending-age', '0']);
    expect(stopped.code, stopped.stderr).toBe(4);
    expect(stopped.lines.map((line) => line.text).join('\n')).toContain(`[${status === 401 ? 'unauthorized' : 'forbidden'}] (the relay stopped on it)`);
    expect(stopped.lines.map((line) => line.text)).toContain(
      `next       the relay stopped for good on ${status === 401 ? 'unauthorized' : 'forbidden'}: fix that (docs/runbook.md), then deliver what waits: oncebox relay ${path} --server URL --drain (with the job's token in ONCEBOX_TOKEN), or run the job again`,
    );
    // Nothing lost: the next run, with the job's token, delivers every batch.
    const again = await runScript(CLI, ['relay', path, '--server', server.url, '--drain'], { env: { ONCEBOX_TOKEN: job }, timeoutMs: 30_000 });
    expect(again.code, again.stderr).toBe(0);
    expect((await stored(server)).map((event) => event.partitionKey)).toEqual(['batch-1', 'batch-2', 'batch-3']);
    expect((await runScript(CLI, ['status', path, '--max-pending-age', '0'])).code).toBe(0);
  });

  it('leaves a file whose delivery stalled to `oncebox status --max-pending-age`, which exits 5', async () => {
    const { server } = await serverWithTokens();
    const path = await committedFile(server.url);
    // Committed, and no relay ran: pending for longer than no time at all, but for less than an hour.
    const stalled = await runScript(CLI, ['status', path, '--max-pending-age', '0']);
    expect(stalled.code).toBe(5);
    // It says why: nothing is delivering the file.
    expect(stalled.lines.map((line) => line.text)).toContain(
      `next       no relay is delivering this file (none holds its lease): start one, oncebox relay ${path} --server URL --drain (with the job's token in ONCEBOX_TOKEN); a job with relay: 'external' needs one beside it`,
    );
    expect((await runScript(CLI, ['status', path, '--max-pending-age', '3600'])).code).toBe(0);
    expect((await runScript(CLI, ['status', path])).code).toBe(0);
  });

  it('is refused by `oncebox relay` at its start, with nothing pending too', async () => {
    const { server, job } = await serverWithTokens();
    const path = await committedFile(server.url);
    const drained = await runScript(CLI, ['relay', path, '--server', server.url, '--drain'], { env: { ONCEBOX_TOKEN: job }, timeoutMs: 30_000 });
    expect(drained.code, drained.stderr).toBe(0);
    const bogus = await runScript(CLI, ['relay', path, '--server', server.url, '--drain'], { env: { ONCEBOX_TOKEN: `obx_${'1'.repeat(16)}_${'b'.repeat(43)}` }, timeoutMs: 30_000 });
    expect(bogus.code).toBe(1);
    expect(bogus.stderr).toContain('the server does not know this token');
  });

  it('is refused at openOutbox, not after the first commit, with a typed error naming the fix', async () => {
    const { server, other } = await serverWithTokens();
    // Attempt 2 on a fresh file reads the run's state from the server first (resume): refused the same way.
    for (const [token, code, attempt] of [[undefined, 'unauthorized', 1], [other, 'forbidden', 1], [undefined, 'unauthorized', 2], [other, 'forbidden', 2]] as const) {
      const before = await refusals(server);
      const opening = openOutbox({ path: join(tempDir(), 'job.db'), server: server.url, token, producer: 'orders-ingest', run: { ...RUN, attempt }, logger: quiet });
      await expect(opening).rejects.toBeInstanceOf(CredentialsError);
      await expect(opening).rejects.toMatchObject({ code, status: code === 'unauthorized' ? 401 : 403 });
      expect(await refusals(server)).toBe(before + 1);
    }
  });

  it("refuses a read token at openOutbox and at `oncebox relay`'s start, which it passed before (it may read the stream)", async () => {
    const { server } = await serverWithTokens();
    const reader = (await server.server.store.tokens.create({ scope: 'read', reads: ['events', 'streams'] })).token;
    const opening = openOutbox({ path: join(tempDir(), 'job.db'), server: server.url, token: reader, producer: 'orders-ingest', run: RUN, logger: quiet });
    await expect(opening).rejects.toBeInstanceOf(CredentialsError);
    await expect(opening).rejects.toMatchObject({ code: 'forbidden', message: expect.stringContaining('this is a read token: it may read events and streams, and publish nothing') });
    const path = await committedFile(server.url);
    const relay = await runScript(CLI, ['relay', path, '--server', server.url, '--drain'], { env: { ONCEBOX_TOKEN: reader }, timeoutMs: 30_000 });
    expect(relay.code).toBe(1);
    expect(relay.stderr).toContain('this is a read token');
    expect((await runScript(CLI, ['status', path])).code).toBe(4);
    expect(await stored(server)).toEqual([]);
  });

  it('refuses at box.asset() an asset outside the token\'s list, naming the one meant, before any commit moves the checkpoint', async () => {
    const { server, job } = await serverWithTokens();
    const box = await openOutbox({ path: join(tempDir(), 'job.db'), server: server.url, token: job, producer: 'orders-ingest', run: RUN, logger: quiet });
    expect(() => box.asset('batch_raedy')).toThrow(
      expect.objectContaining({ code: 'invalid_emission', field: 'asset', message: 'asset: the job\'s token may not publish to "batch_raedy" (it may publish to "batch_ready"); did you mean "batch_ready"?' }),
    );
    expect(() => box.asset('orders_loaded')).toThrow(/give the job a token that lists it/);
    // The lifecycle assets go with any publish token, and a listed asset as ever.
    expect(box.complete((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'day-1' })).recorded).toBe(true);
    expect((await box.close()).pending).toBe(0);
    expect((await stored(server)).map((event) => event.asset).sort()).toEqual(['batch_ready', 'oncebox.run_succeeded']);
  });

  it('takes ONCEBOX_TOKEN when openOutbox and openConsumer are given none', async () => {
    const { server, job } = await serverWithTokens();
    // One token for the consumer: it publishes as its group, and reads the events it consumes.
    const consumerToken = (await server.server.store.tokens.create({ scope: 'publish', producers: 'summariser', assets: ['run_done'], consumes: ['batch_ready'] })).token;
    const before = process.env.ONCEBOX_TOKEN;
    try {
      process.env.ONCEBOX_TOKEN = job;
      const box = await openOutbox({ path: join(tempDir(), 'job.db'), server: server.url, producer: 'orders-ingest', run: RUN, logger: quiet });
      await box.asset('batch_ready').emit({ partitionKey: 'batch-1' });
      await box.close();
      process.env.ONCEBOX_TOKEN = consumerToken;
      const consumer = await openConsumer({ path: join(tempDir(), 'consumer.db'), server: server.url, group: 'summariser', assets: ['batch_ready'], logger: quiet, waitSeconds: 0.2 });
      expect(consumer.epoch).toBe(1);
      await consumer.close();
    } finally {
      if (before === undefined) delete process.env.ONCEBOX_TOKEN;
      else process.env.ONCEBOX_TOKEN = before;
    }
  });

  it('stops a running relay at once: receipts reject with it, close() says it, and nothing is lost', async () => {
    const { server, job } = await serverWithTokens();
    const path = join(tempDir(), 'job.db');
    const box = await openOutbox({ path, server: server.url, token: job, producer: 'orders-ingest', run: RUN, logger: quiet });
    await box.asset('batch_ready').emit({ partitionKey: 'batch-1' });
    // The token is revoked while the job runs, as an admin does (DELETE /v1/tokens/:id: the instance
    // forgets its cached grants at once, so no wait on the cache's clock): the next delivery is refused.
    const [info] = await server.server.store.tokens.list();
    const revoked = await fetch(`${server.url}/v1/tokens/${info!.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${ADMIN}` } });
    expect(revoked.status).toBeLessThan(300);
    const before = await refusals(server);
    const second = box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-2' }));
    await expect(second.receipt()).rejects.toMatchObject({ code: 'unauthorized' });
    // "At once", without a clock: close() is given far longer than the test may run, so it returns only
    // because the relay has stopped for good, after exactly one refused request (never retried).
    const left = await box.close({ timeoutMs: 3_600_000 });
    expect(await refusals(server)).toBe(before + 1);
    expect(left).toMatchObject({ pending: 1, pendingEvents: 1, pendingCheckpoints: 0, dead: 0, lastError: { code: 'unauthorized' } });
    expect((await stored(server)).map((event) => event.partitionKey)).toEqual(['batch-1']);
  });

  it('ends openConsumer, a consumer whose read token is refused, and `oncebox events`, each at once', async () => {
    const { server, job } = await serverWithTokens();
    const group = (await server.server.store.tokens.create({ scope: 'publish', producers: 'summariser', assets: ['run_done'] })).token;
    await expect(openConsumer({ path: join(tempDir(), 'c1.db'), server: server.url, group: 'summariser', assets: ['batch_ready'], logger: quiet })).rejects.toMatchObject({ code: 'unauthorized' });
    // A token that may claim and publish, but not read events: refused at open, not at the first fetch.
    await expect(openConsumer({ path: join(tempDir(), 'c2.db'), server: server.url, token: group, group: 'summariser', assets: ['batch_ready'], logger: quiet })).rejects.toMatchObject({ code: 'forbidden' });
    for (const follow of [[], ['--follow']]) {
      const before = await refusals(server);
      const events = await runScript(CLI, ['events', '--server', server.url, ...follow], { env: { ONCEBOX_TOKEN: job }, timeoutMs: 30_000 });
      expect(await refusals(server)).toBe(before + 1);
      expect(events.code).toBe(1);
      expect(events.stderr).toContain('answered 403');
    }
  });
});
