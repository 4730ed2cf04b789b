import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { openOutbox, type Receipt } from '../../src/outbox/index.js';
import { allEvents, startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';
import { startFaultProxy } from '../../src/testing/fault-proxy.js';

/**
 * The relay says which keys are its run's alone (the oncebox-run-keys header), and the embedded store files those
 * beside the run's other keys. Driven end to end, with the real relay and server: a key the user gave
 * is still one event across runs and files, a partition's key is one event across attempts on fresh
 * machines, and each is filed where the store's locality wants it.
 */
describe('keys filed by run, end to end', () => {
  it("keeps an explicit key one event across runs, a partition's one across attempts, and files only the run's keys by run", async () => {
    const { url, dbPath } = await startServer();
    const emitBoth = async (runId: string, attempt: number) => {
      const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'orders-ingest', run: { workflow: 'orders', runId, task: 'ingest', attempt }, server: url });
      const asset = box.asset('batch_ready');
      const receipts = await Promise.all([asset.emit({ key: 'order-17', partitionKey: 'order-17' }), asset.emit({ partitionKey: 'batch-1' })]);
      expect((await box.close()).pending).toBe(0);
      return receipts;
    };
    const [explicit, partition] = await emitBoth('2026-12-01', 1);
    const [explicitAgain, otherRunsPartition] = await emitBoth('2026-12-02', 1);
    // A retry of the first run on a fresh machine (a new file, attempt 2) derives the same keys.
    const [, partitionRetried] = await emitBoth('2026-12-01', 2);
    const receipt = (r: Receipt) => [r.eventId, r.duplicate];
    expect(receipt(explicitAgain)).toEqual([explicit.eventId, true]);
    expect(receipt(partitionRetried)).toEqual([partition.eventId, true]);
    expect(receipt(otherRunsPartition)).toEqual([expect.any(String), false]);
    expect(otherRunsPartition.eventId).not.toBe(partition.eventId);
    expect(await allEvents(url)).toHaveLength(3);

    const db = new Database(dbPath, { readonly: true });
    const filed = db.prepare('SELECT run_id, partition_key, run_slot, filed_partition FROM events ORDER BY cursor').all() as {
      run_id: string;
      partition_key: string;
      run_slot: number;
      filed_partition: string;
    }[];
    db.close();
    const placeOf = (runId: string, partitionKey: string) => {
      const row = filed.find((event) => event.run_id === runId && event.partition_key === partitionKey)!;
      return [row.run_slot, row.filed_partition];
    };
    // The user's key per producer; the partition's with its run and partition.
    expect(placeOf('2026-12-01', 'order-17')).toEqual([0, '']);
    expect(placeOf('2026-12-01', 'batch-1')).toEqual([expect.any(Number), 'batch-1']);
    expect(placeOf('2026-12-01', 'batch-1')[0]).not.toBe(0);
    expect(placeOf('2026-12-02', 'batch-1')[0]).not.toBe(placeOf('2026-12-01', 'batch-1')[0]);
  });
  it("keeps the run keys through the testing kit's fault proxy, so a job tested through it is filed as in production", async () => {
    const { url, dbPath } = await startServer();
    const proxy = await startFaultProxy(url, { delayMs: 0 });
    try {
      const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'p', run: { workflow: 'w', runId: 'r', attempt: 1 }, server: proxy.url });
      await box.asset('batch_ready').emit({ partitionKey: 'batch-7' });
      await box.close();
    } finally {
      await proxy.close();
    }
    const db = new Database(dbPath, { readonly: true });
    expect(db.prepare('SELECT filed_partition FROM events').all()).toEqual([{ filed_partition: 'batch-7' }]);
    db.close();
  });
});
