import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { copyFileSync, rmSync } from 'node:fs';
import { LeaseLostError, openOutbox, RejectedError, StreamStateLostError } from '../../src/outbox/index.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { RUN, testOutbox } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

describe('delivery through the relay', () => {
  it('delivers a batch loop to the server once each, in commit order, with matching receipts', async () => {
    const { url, events } = await startServer();
    const box = await testOutbox({ server: url });
    const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
    const ready = box.asset('batch_ready');
    const emissions = [];
    for (let batch = 1; batch <= 50; batch++) {
      emissions.push(
        box.commit((tx) => {
          tx.set(progress, { batch });
          return tx.emit(ready, { partitionKey: `batch-${batch}`, extra: { rows: batch * 10 } });
        }),
      );
    }
    const receipts = await Promise.all(emissions.map((emission) => emission.receipt()));
    const stored = await events();
    expect(stored.map((event) => event.partitionKey)).toEqual(emissions.map((_, i) => `batch-${i + 1}`));
    expect(stored.map((event) => event.eventId)).toEqual(receipts.map((receipt) => receipt.eventId));
    expect(stored.map((event) => event.timestamp)).toEqual(receipts.map((receipt) => receipt.timestamp));
    expect(receipts.every((receipt) => !receipt.duplicate)).toBe(true);
    expect(stored[40]).toMatchObject({
      asset: 'batch_ready',
      extra: { rows: 410 },
      producer: 'orders-ingest',
      workflow: RUN.workflow,
      runId: RUN.runId,
      task: RUN.task,
      attempt: 1,
      // Each commit takes two places in the stream: the emission, then the checkpoint update.
      seq: 81,
    });
    expect(box.status()).toMatchObject({ pending: 0, delivered: 50, dead: 0 });
  });

  it('resolves an immediate emit with the receipt, and a re-emit with the same receipt marked duplicate', async () => {
    const { url, events } = await startServer();
    const box = await testOutbox({ server: url });
    const done = box.asset('run_done');
    const receipt = await done.emit({ partitionKey: 'done' });
    expect(receipt.duplicate).toBe(false);
    expect(await done.emit({ partitionKey: 'done' })).toEqual({ ...receipt, duplicate: true });
    expect(await events()).toHaveLength(1);
  });

  it('parks a rejected row as dead with its reason, rejects its receipt, and delivers the rest', async () => {
    const { url, events } = await startServer();
    const box = await testOutbox({ server: url });
    const ready = box.asset('batch_ready');
    const before = box.commit((tx) => tx.emit(ready, { partitionKey: 'batch-1' }));
    const unknown = box.asset('not_registered').emit({ partitionKey: 'x' });
    const after = box.commit((tx) => tx.emit(ready, { partitionKey: 'batch-2' }));
    await expect(unknown).rejects.toBeInstanceOf(RejectedError);
    await expect(unknown).rejects.toMatchObject({
      code: 'rejected',
      rejection: 'unknown_asset',
      message: expect.stringContaining(
        '(unknown_asset): asset: "not_registered" is not registered on this server; `oncebox dead list` on the outbox file says what fixes it',
      ),
    });
    await Promise.all([before.receipt(), after.receipt()]);
    expect((await events()).map((event) => event.partitionKey)).toEqual(['batch-1', 'batch-2']);
    const status = box.status();
    expect(status).toMatchObject({ pending: 0, delivered: 2, dead: 1 });
    expect(status.deadRows).toEqual([
      expect.objectContaining({ asset: 'not_registered', partitionKey: 'x', code: 'unknown_asset' }),
    ]);
  });

  it('drains on close, and leaves rows pending for the next relay when the server is down', async () => {
    const path = join(tempDir(), 'outbox.db');
    const down = 'http://127.0.0.1:9';
    const first = await openOutbox({ path, producer: 'p', run: RUN, server: down, retryMinDelayMs: 5, retryMaxDelayMs: 20 });
    const ready = first.asset('batch_ready');
    for (let i = 1; i <= 5; i++) first.commit((tx) => tx.emit(ready, { partitionKey: `b${i}` }));
    const receipt = first.commit((tx) => tx.emit(ready, { partitionKey: 'b6' })).receipt();
    expect(await first.close({ timeoutMs: 200 })).toMatchObject({ pending: 6, dead: 0, lastError: { code: 'network' } });
    await expect(receipt).rejects.toMatchObject({ code: 'outbox_closed' });

    const { url, events } = await startServer();
    const second = await openOutbox({ path, producer: 'p', run: { ...RUN, attempt: 2 }, server: url });
    expect(await second.close({ timeoutMs: 10_000 })).toMatchObject({ pending: 0, dead: 0 });
    // Attempt 2 took the leftovers over: they go out first, in commit order, as its own.
    expect((await events()).map((event) => [event.partitionKey, event.attempt])).toEqual(
      [1, 2, 3, 4, 5, 6].map((i) => [`b${i}`, 2]),
    );
  });

  it('delivers the rows of several runs sharing a file in commit order, not stream by stream', async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const options = { path, producer: 'p', server: url, relay: 'manual' as const };
    const runA = await openOutbox({ ...options, run: { ...RUN, runId: 'run-a' } });
    const runB = await openOutbox({ ...options, run: { ...RUN, runId: 'run-b' } });
    const commit = (box: typeof runA, partitionKey: string) => box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey }));
    const order = ['a1', 'a2', 'a3', 'b1', 'b2', 'a4'];
    for (const partitionKey of order) commit(partitionKey.startsWith('a') ? runA : runB, partitionKey);
    while ((await runA.relay!.step()) > 0);
    expect((await events()).map((event) => event.partitionKey)).toEqual(order);
    await runA.close({ timeoutMs: 0 });
    await runB.close({ timeoutMs: 0 });
  });

  it("parks a fenced attempt's rows and goes on delivering the file's other runs", async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const down = 'http://127.0.0.1:9';
    const options = { path, producer: 'p', server: down, relay: 'manual' as const };
    // Run A's attempt 1 and run B commit while the server is unreachable.
    const runA = await openOutbox({ ...options, run: { ...RUN, runId: 'run-a' } });
    runA.commit((tx) => tx.emit(runA.asset('batch_ready'), { partitionKey: 'a1' }));
    await runA.close({ timeoutMs: 0 });
    const runB = await openOutbox({ ...options, run: { ...RUN, runId: 'run-b' } });
    runB.commit((tx) => tx.emit(runB.asset('batch_ready'), { partitionKey: 'b1' }));
    await runB.close({ timeoutMs: 0 });
    // Meanwhile run A's attempt 2 delivered from another machine.
    const elsewhere = await openOutbox({ path: join(tempDir(), 'other.db'), producer: 'p', server: url, run: { ...RUN, runId: 'run-a', attempt: 2 } });
    await elsewhere.asset('batch_ready').emit({ partitionKey: 'a1' });
    await elsewhere.close({ timeoutMs: 0 });

    const relay = await openOutbox({ path, producer: 'p', server: url });
    expect(await relay.close({ timeoutMs: 10_000 })).toMatchObject({ pending: 0, dead: 1 });
    expect((await events()).map((event) => [event.runId, event.partitionKey, event.attempt])).toEqual([
      ['run-a', 'a1', 2],
      ['run-b', 'b1', 1],
    ]);
    const status = await openOutbox({ path, producer: 'p', server: url, relay: 'manual' });
    expect(status.status()).toMatchObject({ dead: 1, deadRows: [expect.objectContaining({ partitionKey: 'a1', code: 'fenced', reason: 'fenced by attempt 2' })] });
    // The fence was the relay's last error, until a delivery of the other run went through.
    expect(status.status().lastError).toBeNull();
    await status.close({ timeoutMs: 0 });
  });

  it('records the last error while the server is unreachable', async () => {
    const box = await testOutbox({ server: 'http://127.0.0.1:9', retryMinDelayMs: 5, retryMaxDelayMs: 10 });
    box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'b1' }));
    await expect.poll(() => box.status().lastError?.code, { timeout: 60_000 }).toBe('network');
    expect(box.status().lastError?.message).toMatch(/^could not reach http:\/\/127\.0\.0\.1:9\/v1\/emissions/);
    expect(box.status().oldestPendingAgeMs).toBeGreaterThanOrEqual(0);
  });
});

describe('a server that lost what it acknowledged', () => {
  it.each(['restored from an old backup', 'reset to an empty store'] as const)(
    'is %s: the relay stops with stream_state_lost and marks nothing, rather than resend out of order',
    async (what) => {
      const dbPath = join(tempDir(), 'server.db');
      const backup = join(tempDir(), 'backup.db');
      let server = await startServer({ db: dbPath });
      const proxy = await startFaultProxy(server.url);
      const box = await testOutbox({ server: proxy.url, relay: 'manual' });
      const ready = box.asset('batch_ready');
      const restart = async (restoreFrom?: string) => {
        await server.close();
        if (restoreFrom !== undefined) {
          for (const suffix of ['-wal', '-shm']) rmSync(`${dbPath}${suffix}`, { force: true });
          if (restoreFrom === '') rmSync(dbPath);
          else copyFileSync(restoreFrom, dbPath);
        }
        server = await startServer({ db: dbPath });
        proxy.setUpstream(server.url);
      };

      box.commit((tx) => tx.emit(ready, { partitionKey: 'b1' }));
      expect(await box.relay!.step()).toBe(1);
      await server.close();
      copyFileSync(dbPath, backup);
      await restart();
      box.commit((tx) => tx.emit(ready, { partitionKey: 'b2' }));
      expect(await box.relay!.step()).toBe(1);
      await restart(what === 'reset to an empty store' ? '' : backup);

      const b3 = box.commit((tx) => tx.emit(ready, { partitionKey: 'b3' }));
      await expect(box.relay!.step()).rejects.toBeInstanceOf(StreamStateLostError);
      await expect(box.relay!.step()).rejects.toMatchObject({
        code: 'stream_state_lost',
        message: expect.stringMatching(/^the server expects seq [12] of stream orders-ingest\/2026-11-30 attempt 1, but this outbox settled every row before seq 3/),
      });
      expect(box.status()).toMatchObject({ pending: 1, delivered: 2 });
      expect(box.file.rows.rowById.get({ id: b3.rowId! })?.state).toBe('pending');
    },
  );

  it('is restored from an old backup under a job whose relay runs on its own: the receipts awaited and asked for reject with stream_state_lost, not wait for ever', async () => {
    const dbPath = join(tempDir(), 'server.db');
    const backup = join(tempDir(), 'backup.db');
    let server = await startServer({ db: dbPath });
    const proxy = await startFaultProxy(server.url);
    const box = await testOutbox({ server: proxy.url });
    const ready = box.asset('batch_ready');
    await box.commit((tx) => tx.emit(ready, { partitionKey: 'b1' })).receipt();
    await server.close();
    copyFileSync(dbPath, backup);
    server = await startServer({ db: dbPath });
    proxy.setUpstream(server.url);
    await box.commit((tx) => tx.emit(ready, { partitionKey: 'b2' })).receipt();
    await server.close();
    for (const suffix of ['-wal', '-shm']) rmSync(`${dbPath}${suffix}`, { force: true });
    copyFileSync(backup, dbPath);
    server = await startServer({ db: dbPath });
    proxy.setUpstream(server.url);

    const b3 = box.commit((tx) => tx.emit(ready, { partitionKey: 'b3' }));
    const awaited = b3.receipt().then(
      () => 'delivered',
      (error: unknown) => error,
    );
    await vi.waitFor(() => expect(box.status().lastError?.code).toBe('stream_state_lost'), { timeout: 60_000 });
    // The relay stopped in the step that recorded its error: the receipt awaited is settled by now (its
    // callbacks run before the next turn of the event loop), and one asked for now rejects at once.
    const settled = await Promise.race([awaited, new Promise((resolve) => setImmediate(() => resolve('still waiting')))]);
    expect(settled).toBeInstanceOf(StreamStateLostError);
    await expect(b3.receipt()).rejects.toMatchObject({ code: 'stream_state_lost' });
    expect(box.status()).toMatchObject({ pending: 1 });
    const closed = await box.close({ timeoutMs: 0 });
    expect(closed.pending).toBe(1);
  });
});

describe('the relay lease', () => {
  it('lets one relay deliver at a time, and a relay that lost its lease cannot mark rows', async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    let clock = 1_000_000;
    const options = { path, producer: 'p', run: RUN, server: url, relay: 'manual' as const, leaseTtlMs: 1000, now: () => clock };
    const a = await openOutbox(options);
    const b = await openOutbox(options);
    const ready = a.asset('batch_ready');
    a.commit((tx) => tx.emit(ready, { partitionKey: 'b1' }));
    expect(await a.relay!.step()).toBe(1);
    a.commit((tx) => tx.emit(ready, { partitionKey: 'b2' }));
    await expect(b.relay!.step()).rejects.toBeInstanceOf(LeaseLostError);

    clock += 1001; // a's lease runs out, as for a paused process, and b takes over
    expect(await b.relay!.step()).toBe(1);
    a.commit((tx) => tx.emit(ready, { partitionKey: 'b3' }));
    await expect(a.relay!.step()).rejects.toMatchObject({ code: 'lease_lost' });
    // a's request reached the server (b3 is stored) but a could not mark the row: it is b's to settle.
    expect(a.status()).toMatchObject({ pending: 1, delivered: 2 });
    expect(await b.relay!.step()).toBe(1);
    expect(a.status()).toMatchObject({ pending: 0, delivered: 3 });
    expect((await events()).map((event) => event.partitionKey)).toEqual(['b1', 'b2', 'b3']);
    await a.close({ timeoutMs: 0 });
    await b.close({ timeoutMs: 0 });
  });
});

describe('keeping the file small', () => {
  it('prunes delivered rows past pruneDeliveredAfterMs and keeps pending and dead ones', async () => {
    const { url } = await startServer();
    let clock = Date.parse('2026-11-30T00:00:00Z');
    const box = await testOutbox({ server: url, relay: 'manual', now: () => clock, pruneDeliveredAfterMs: 7 * 24 * 3600_000 });
    const ready = box.asset('batch_ready');
    for (let i = 1; i <= 3; i++) box.commit((tx) => tx.emit(ready, { partitionKey: `b${i}` }));
    box.commit((tx) => tx.emit(box.asset('not_registered'), { partitionKey: 'x' }));
    while ((await box.relay!.step()) > 0);
    box.commit((tx) => tx.emit(ready, { partitionKey: 'b4' }));
    expect(box.relay!.prune()).toBe(0);
    clock += 8 * 24 * 3600_000;
    expect(box.relay!.prune()).toBe(3);
    expect(box.status()).toMatchObject({ pending: 1, delivered: 0, dead: 1 });
  });

  it("keeps each stream's newest row, so a reopened attempt goes on numbering after it", async () => {
    const { url, events } = await startServer();
    let clock = Date.parse('2026-11-30T00:00:00Z');
    const path = join(tempDir(), 'outbox.db');
    const options = { path, server: url, producer: 'p', run: RUN, relay: 'manual' as const, now: () => clock };
    const first = await openOutbox(options);
    for (let i = 1; i <= 3; i++) first.commit((tx) => tx.emit(first.asset('batch_ready'), { partitionKey: `b${i}` }));
    while ((await first.relay!.step()) > 0);
    clock += 8 * 24 * 3600_000;
    expect(first.relay!.prune()).toBe(2);
    await first.close({ timeoutMs: 0 });
    const again = await openOutbox(options);
    again.commit((tx) => tx.emit(again.asset('batch_ready'), { partitionKey: 'b4' }));
    while ((await again.relay!.step()) > 0);
    expect((await events()).map((event) => [event.partitionKey, event.seq])).toEqual([['b1', 1], ['b2', 2], ['b3', 3], ['b4', 4]]);
    await again.close({ timeoutMs: 0 });
  });
});
