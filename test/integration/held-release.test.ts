import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startServer } from '../support/server.js';
import { batchProgress as progress, commitBatch as batch, openTask as open } from '../support/task-runs.js';
import { tempDir } from '../support/temp.js';

/** Held emissions (G25): released under the keys they were committed with, and not held again by a reopened attempt that failed for good. */

describe('held emissions', () => {
  it('are released under the key they were committed with: an explicit one, or one placed by the commit’s checkpoints', async () => {
    const server = await startServer();
    const box = await open(server, join(tempDir(), 'job.db'), 't', 1);
    const held = box.commit((tx) => tx.emit(box.asset('run_done'), { key: 'my-own-key', on: 'success' }));
    const noPartition = box.commit((tx) => {
      tx.set(box.checkpoint('backlog', progress), { batch: 1 });
      return tx.emit(box.asset('run_done'), { on: 'success' });
    });
    box.complete();
    await box.close();
    const keys = (await server.events({ asset: 'run_done' })).map((e) => e.key).sort();
    expect(keys).toEqual([held.key, noPartition.key].sort());
  });

  it('are released with the partition, partition date and extra they were committed with', async () => {
    const server = await startServer();
    const box = await open(server, join(tempDir(), 'job.db'), 't', 1);
    const held = box.commit((tx) => tx.emit(box.asset('run_done'), { partitionKey: 'p-1', partitionDate: '2026-12-01T00:00:00Z', extra: { rows: 3 }, on: 'success' }));
    box.complete();
    await box.close();
    const [event] = await server.events({ asset: 'run_done' });
    expect(event).toMatchObject({ key: held.key, partitionKey: 'p-1', partitionDate: '2026-12-01T00:00:00Z', extra: { rows: 3 } });
  });

  it('stay discarded when the attempt that failed for good opens its file again', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'job.db');
    const first = await open(server, path, 't', 1);
    batch(first, 't', 1);
    first.fail(new Error('x'));
    await first.close();
    const again = await open(server, path, 't', 1);
    expect(again.status()).toMatchObject({ held: 0, discarded: 1 });
    await again.close();
  });
});
