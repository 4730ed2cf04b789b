import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FencedError, openOutbox, type Outbox } from '../../src/outbox/index.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * A zombie attempt and its retry on one machine share one outbox file: the retry reopens the file the
 * zombie is still committing to. Every interleaving here is driven by hand, one statement at a time.
 */
const progressSchema = z.object({ batch: z.number().int() });
const LEASE_TTL_MS = 1000;
/** The relays' clock: each drain first lets the previous holder's lease run out, so any relay may deliver. */
let clock = 1_000_000;

async function open(path: string, url: string, attempt: number, task = 'ingest'): Promise<Outbox> {
  return openOutbox({
    path,
    server: url,
    relay: 'manual',
    producer: 'orders-ingest',
    run: { workflow: 'orders', runId: '2026-11-30', task, attempt },
    durability: 'normal',
    leaseTtlMs: LEASE_TTL_MS,
    now: () => clock,
  });
}

function commitBatch(box: Outbox, batch: number) {
  const progress = box.checkpoint('backlog', progressSchema);
  return box.commit((tx) => {
    tx.set(progress, { batch });
    return tx.emit(box.asset('batch_ready'), { partitionKey: `batch-${batch}` });
  });
}

async function drain(box: Outbox): Promise<void> {
  clock += LEASE_TTL_MS + 1;
  while ((await box.relay!.step()) > 0);
}

describe('a zombie and its retry on the same outbox file', () => {
  it('refuses the zombie commit once the retry has opened the file, and the retry delivers its own batch (the lost-emission interleaving)', async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const zombie = await open(path, url, 1);
    commitBatch(zombie, 1);
    commitBatch(zombie, 2);
    await drain(zombie);

    const retry = await open(path, url, 2);
    const resumeFrom = retry.checkpoint('backlog', progressSchema).get()!.batch;
    expect(resumeFrom).toBe(2);
    // The retry records where it resumes, and that reaches the server first: the epoch is now 2.
    retry.commit((tx) => tx.set(retry.checkpoint('backlog', progressSchema), { batch: resumeFrom }));
    await drain(retry);

    // The zombie, still running, gets to batch 3 first: its commit is refused, nothing is written.
    expect(() => commitBatch(zombie, 3)).toThrow(FencedError);
    expect(() => commitBatch(zombie, 3)).toThrow(
      'attempt 1 of run 2026-11-30 is fenced by attempt 2, which has opened this outbox file: this attempt is a zombie and must stop; its work is being done by the later attempt',
    );
    const three = commitBatch(retry, 3);
    const four = commitBatch(retry, 4);
    await drain(retry);

    expect((await events()).map((event) => [event.partitionKey, event.attempt])).toEqual([
      ['batch-1', 1],
      ['batch-2', 1],
      ['batch-3', 2],
      ['batch-4', 2],
    ]);
    await expect(three.receipt()).resolves.toMatchObject({ duplicate: false });
    await expect(four.receipt()).resolves.toMatchObject({ duplicate: false });
    expect(retry.status()).toMatchObject({ pending: 0, dead: 0, fenced: false });
    await zombie.close({ timeoutMs: 0 });
    await retry.close({ timeoutMs: 0 });
  });

  it("delivers attempt 1's leftovers before what attempt 2 commits next, all as attempt 2's, in commit order", async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const first = await open(path, 'http://127.0.0.1:9', 1);
    for (let batch = 1; batch <= 4; batch++) commitBatch(first, batch);
    await first.close({ timeoutMs: 0 });
    const retry = await open(path, url, 2);
    commitBatch(retry, 5);
    commitBatch(retry, 6);
    await drain(retry);
    expect((await events()).map((event) => [event.partitionKey, event.attempt, event.seq])).toEqual(
      [1, 2, 3, 4, 5, 6].map((batch) => [`batch-${batch}`, 2, 2 * batch - 1]),
    );
    await retry.close({ timeoutMs: 0 });
  });

  it('lets two processes of the same attempt commit to one file in turn: each commit numbers after the last', async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const one = await open(path, url, 1);
    const two = await open(path, url, 1);
    commitBatch(one, 1);
    commitBatch(two, 2);
    commitBatch(one, 3);
    commitBatch(two, 4);
    await drain(one);
    expect((await events()).map((event) => [event.partitionKey, event.seq])).toEqual([
      ['batch-1', 1],
      ['batch-2', 3],
      ['batch-3', 5],
      ['batch-4', 7],
    ]);
    await one.close({ timeoutMs: 0 });
    await two.close({ timeoutMs: 0 });
  });

  it('refuses an older attempt that opens the file after a newer one did', async () => {
    const { url } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    await (await open(path, url, 2)).close({ timeoutMs: 0 });
    const opening = open(path, url, 1);
    await expect(opening).rejects.toBeInstanceOf(FencedError);
    await expect(opening).rejects.toMatchObject({ code: 'fenced', attempt: 1, fencedBy: 2 });
  });

  it("takes over what the zombie committed before the retry opened the file, so a fence cannot lose it", async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const zombie = await open(path, url, 1);
    commitBatch(zombie, 1);
    await drain(zombie);
    commitBatch(zombie, 2); // committed, not yet delivered

    const retry = await open(path, url, 2);
    // The checkpoint counts batch 2, so the retry goes on with batch 3; batch 2 is its to deliver now.
    expect(retry.checkpoint('backlog', progressSchema).get()).toEqual({ batch: 2 });
    commitBatch(retry, 3);
    await drain(retry);
    expect((await events()).map((event) => [event.partitionKey, event.attempt, event.seq])).toEqual([
      ['batch-1', 1, 1],
      ['batch-2', 2, 1],
      ['batch-3', 2, 3],
    ]);
    expect(retry.status()).toMatchObject({ pending: 0, pendingCheckpoints: 0, delivered: 3, dead: 0 });
    await zombie.close({ timeoutMs: 0 });
    await retry.close({ timeoutMs: 0 });
  });

  it("does not let the zombie's relay mark a row the retry took over while the zombie's request was in flight", async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const zombie = await open(path, url, 1);
    commitBatch(zombie, 1);
    // The zombie's relay sends batch 1 as attempt 1; the retry opens the file while the request is out.
    const inFlight = zombie.relay!.step();
    const retry = await open(path, url, 2);
    expect(await inFlight).toBe(0);
    await zombie.close({ timeoutMs: 0 });
    // The retry delivers the taken-over rows as attempt 2: the server answers with the original receipt.
    await drain(retry);
    const stored = await events();
    expect(stored.map((event) => [event.partitionKey, event.attempt])).toEqual([['batch-1', 1]]);
    expect(retry.status()).toMatchObject({ pending: 0, pendingCheckpoints: 0, delivered: 1 });
    await retry.close({ timeoutMs: 0 });
  });

  it("revives rows a fence parked when a later retry reopens the file, since the file's checkpoint counts them", async () => {
    const { url, events } = await startServer();
    const path = join(tempDir(), 'a.db');
    const first = await open(path, url, 1);
    commitBatch(first, 1);
    await drain(first);
    commitBatch(first, 2);
    commitBatch(first, 3);
    // Attempt 2 runs on another machine, delivers batch 2 and dies before batch 3.
    const elsewhere = await open(join(tempDir(), 'b.db'), url, 2);
    expect(elsewhere.resumedFrom?.checkpoints).toEqual({ backlog: { batch: 1 } });
    commitBatch(elsewhere, 2);
    await drain(elsewhere);
    await elsewhere.close({ timeoutMs: 0 });
    // Attempt 1's relay learns it is fenced: its batches 2 and 3 are parked.
    await expect(drain(first)).rejects.toBeInstanceOf(FencedError);
    expect(first.status()).toMatchObject({ dead: 2, fenced: true, fencedBy: 2 });
    await first.close({ timeoutMs: 0 });

    // Attempt 3 comes back to the first machine. Its file says batch 3 is done: so batch 3 must go out.
    const third = await open(path, url, 3);
    expect(third.checkpoint('backlog', progressSchema).get()).toEqual({ batch: 3 });
    commitBatch(third, 4);
    await drain(third);
    expect((await events()).map((event) => [event.partitionKey, event.attempt])).toEqual([
      ['batch-1', 1],
      ['batch-2', 2],
      ['batch-3', 3],
      ['batch-4', 3],
    ]);
    expect(third.status()).toMatchObject({ pending: 0, dead: 0, fenced: false, fencedBy: null });
    await third.close({ timeoutMs: 0 });
  });
});

describe('two outboxes on one file, each with its relay running', () => {
  it("delivers the commits of the one whose relay does not hold the lease: the holder notices another connection's commit", async () => {
    const server = await startServer();
    const path = join(tempDir(), 'shared.db');
    const options = (attempt: number) => ({
      path,
      server: server.url,
      producer: 'orders-ingest',
      run: { workflow: 'orders', runId: '2026-12-01', task: 'ingest', attempt },
      logger: { info() {}, warn() {}, error() {} },
    });
    // The first holds the lease, idle; a second (another process would do the same) commits.
    const holder = await openOutbox(options(1));
    await holder.commit((tx) => tx.emit(holder.asset('batch_ready'), { partitionKey: 'first' })).receipt();
    expect(holder.relay!.holdsLease).toBe(true);
    const other = await openOutbox(options(2));
    expect(other.relay!.holdsLease).toBe(false);
    const receipt = await other.commit((tx) => tx.emit(other.asset('batch_ready'), { partitionKey: 'second' })).receipt();
    expect(receipt.eventId).toMatch(/^[0-9a-f-]{36}$/);
    // Delivered by the lease holder, which saw the other connection's commit: the lease never changed
    // hands (the holder renews it while it lives, so without that watch the receipt would never come).
    expect(holder.relay!.holdsLease).toBe(true);
    expect(other.relay!.holdsLease).toBe(false);
    await other.close();
    await holder.close();
    expect((await server.events()).map((event) => event.partitionKey)).toEqual(['first', 'second']);
  });
});
