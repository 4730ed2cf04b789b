import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { KeyConflictError, openOutbox, RejectedError, type Outbox, type OutboxOptions } from '../../src/outbox/index.js';
import { RUN } from '../support/outbox.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * G5 in every state the first row can be in: a re-run that commits another payload under the key of an
 * emission is refused, whether that row is pending, delivered, dead or pruned, on the same file and on a
 * fresh machine. Never a duplicate answer for a payload the server does not hold.
 */

const PARTITION = 'batch-41';
const FIRST = { partitionKey: PARTITION, partitionDate: '2026-11-30T00:00:00Z', extra: { rows: 10 } };
/** What a re-run may get wrong about the same emission: each is another payload under its key. */
const CHANGES = {
  extra: { ...FIRST, extra: { rows: 11 } },
  partitionDate: { ...FIRST, partitionDate: '2026-12-01T00:00:00Z' },
  'extra left out': { partitionKey: PARTITION, partitionDate: FIRST.partitionDate },
};

const opened: Outbox[] = [];
async function open(path: string, attempt: number, options: Partial<OutboxOptions>): Promise<Outbox> {
  const box = await openOutbox({ path, producer: 'orders-ingest', run: { ...RUN, attempt }, ...options } as OutboxOptions);
  opened.push(box);
  return box;
}

async function closeAll(): Promise<void> {
  for (const box of opened.splice(0)) await box.close({ timeoutMs: 0 });
}

/** What the server stored of the partition: the first payload once, and never another. */
async function storedOfPartition(server: RunningServer, asset: string) {
  return (await server.events()).filter((event) => event.asset === asset && event.partitionKey === PARTITION).map((event) => ({ partitionDate: event.partitionDate, extra: event.extra }));
}

async function refusedAtCommit(box: Outbox, asset: string, payload: object): Promise<void> {
  expect(() => box.commit((tx) => tx.emit(box.asset(asset), payload))).toThrow(KeyConflictError);
}

async function refusedByServer(box: Outbox, asset: string, payload: object): Promise<void> {
  const emission = box.commit((tx) => tx.emit(box.asset(asset), payload));
  await expect(emission.receipt()).rejects.toBeInstanceOf(RejectedError);
  await expect(emission.receipt()).rejects.toMatchObject({ rejection: 'key_conflict' });
  expect(box.status().dead).toBeGreaterThan(0);
}

describe.each(Object.entries(CHANGES))('a re-run committing the same emission with another payload (%s)', (_change, changed) => {
  it('is refused at commit while the first row is pending, and the first payload is what gets delivered', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const first = await open(path, 1, { server: server.url, relay: 'manual' });
    first.commit((tx) => tx.emit(first.asset('batch_ready'), FIRST));
    await refusedAtCommit(first, 'batch_ready', changed);
    await first.close({ timeoutMs: 0 });
    const retry = await open(path, 2, { server: server.url });
    await refusedAtCommit(retry, 'batch_ready', changed);
    await vi.waitFor(() => expect(retry.status().pending).toBe(0), { timeout: 60_000 });
    expect(await storedOfPartition(server, 'batch_ready')).toEqual([{ partitionDate: FIRST.partitionDate, extra: FIRST.extra }]);
    await closeAll();
  });

  it('is refused at commit once the first row was delivered (same file), and by the server on a fresh machine', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const first = await open(path, 1, { server: server.url });
    await first.commit((tx) => tx.emit(first.asset('batch_ready'), FIRST)).receipt();
    await first.close();
    const sameFile = await open(path, 2, { server: server.url });
    await refusedAtCommit(sameFile, 'batch_ready', changed);
    // The same payload is the same emission: its first receipt, marked duplicate.
    const again = await sameFile.commit((tx) => tx.emit(sameFile.asset('batch_ready'), FIRST)).receipt();
    expect(again.duplicate).toBe(true);
    await sameFile.close();
    const fresh = await open(join(tempDir(), 'outbox.db'), 3, { server: server.url });
    await refusedByServer(fresh, 'batch_ready', changed);
    expect(await storedOfPartition(server, 'batch_ready')).toEqual([{ partitionDate: FIRST.partitionDate, extra: FIRST.extra }]);
    await closeAll();
  });

  it('is refused as key_conflict on a fresh machine that reuses the attempt, as with the next attempt (not sequence_reused)', async () => {
    const server = await startServer();
    const first = await open(join(tempDir(), 'outbox.db'), 1, { server: server.url });
    await first.commit((tx) => tx.emit(first.asset('batch_ready'), FIRST)).receipt();
    await first.close();
    // Attempt 1 again on a new file (a runner whose counter was reset): the same position, the same key, other content.
    const reused = await open(join(tempDir(), 'outbox.db'), 1, { server: server.url, resume: 'never' });
    await refusedByServer(reused, 'batch_ready', changed);
    expect(await storedOfPartition(server, 'batch_ready')).toEqual([{ partitionDate: FIRST.partitionDate, extra: FIRST.extra }]);
    await closeAll();
  });

  it('is refused by the server once the delivered row was pruned from the file', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const first = await open(path, 1, { server: server.url });
    await first.commit((tx) => tx.emit(first.asset('batch_ready'), FIRST)).receipt();
    // The newest row of a stream is kept (it tells where the stream is): another one follows.
    await first.commit((tx) => tx.emit(first.asset('batch_ready'), { partitionKey: 'batch-42' })).receipt();
    await first.close();
    // The relay prunes delivered rows older than pruneDeliveredAfterMs after its first delivery.
    const pruned = await open(path, 2, { server: server.url, pruneDeliveredAfterMs: 0 });
    await pruned.commit((tx) => tx.emit(pruned.asset('run_done'), { partitionKey: 'unrelated' })).receipt();
    await vi.waitFor(() => expect(pruned.status().delivered).toBe(2), { timeout: 60_000 });
    await refusedByServer(pruned, 'batch_ready', changed);
    expect(await storedOfPartition(server, 'batch_ready')).toEqual([{ partitionDate: FIRST.partitionDate, extra: FIRST.extra }]);
    await closeAll();
  });

  it('is refused at commit while the first row is dead (same file); on a fresh machine the new payload is the first the server holds', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const first = await open(path, 1, { server: server.url });
    // Not registered yet: the first row is refused for good and parked dead.
    await expect(first.commit((tx) => tx.emit(first.asset('late_asset'), FIRST)).receipt()).rejects.toMatchObject({ rejection: 'unknown_asset' });
    await refusedAtCommit(first, 'late_asset', changed);
    await first.close();
    await server.server.store.registerAsset('late_asset');
    const sameFile = await open(path, 2, { server: server.url });
    await refusedAtCommit(sameFile, 'late_asset', changed);
    await sameFile.close();
    // The server never stored the dead row's payload, so another machine's is no conflict: it is stored once.
    const fresh = await open(join(tempDir(), 'outbox.db'), 3, { server: server.url });
    const receipt = await fresh.commit((tx) => tx.emit(fresh.asset('late_asset'), changed)).receipt();
    expect(receipt.duplicate).toBe(false);
    const expected = changed as { partitionDate?: string; extra?: unknown };
    expect(await storedOfPartition(server, 'late_asset')).toEqual([{ partitionDate: expected.partitionDate, extra: expected.extra ?? null }]);
    await closeAll();
  });
});
