import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LifecycleAsset } from '../../src/outbox/index.js';
import { startServer } from '../support/server.js';
import { commitBatch as batch, delivered, openTask as open } from '../support/task-runs.js';
import { tempDir } from '../support/temp.js';

/**
 * Tasks of one run sharing one outbox file, where one task's statements must never reach another's
 * rows: releasing and recording a terminal commit, parking a fenced attempt's rows, taking over an
 * older attempt's pending rows, and pruning each stream's delivered rows. Found by a hostile review of
 * issue 22: each statement with its task dropped passed every other test.
 */

describe('tasks of one run on one outbox file', () => {
  it('two tasks ending the same attempt each release their own held emissions and each record a success', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'shared.db');
    const extract = await open(server, path, 'extract', 1);
    const load = await open(server, path, 'load', 1);
    batch(extract, 'extract', 1);
    batch(load, 'load', 1);
    batch(extract, 'extract', 2);
    expect(load.complete()).toMatchObject({ recorded: true });
    expect(extract.status().held).toBeGreaterThan(0);
    expect(extract.complete()).toMatchObject({ recorded: true });
    await Promise.all([load.close(), extract.close()]);
    const events = await server.events();
    expect(events.filter((e) => e.asset === 'run_done').map((e) => `${e.task}/${e.partitionKey}`).sort()).toEqual(['extract/extract-1', 'extract/extract-2', 'load/load-1']);
    expect(events.filter((e) => e.asset === LifecycleAsset.Succeeded).map((e) => e.task).sort()).toEqual(['extract', 'load']);
  });

  it('a fence of one task parks nothing of the other task’s pending rows', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'shared.db');
    const loadRetry = await open(server, join(tempDir(), 'fresh.db'), 'load', 2);
    await batch(loadRetry, 'load', 1).receipt();
    await loadRetry.close();
    const zombie = await open(server, path, 'load', 1, { resume: 'never' });
    const extract = await open(server, path, 'extract', 1);
    const z1 = batch(zombie, 'load', 7);
    const e1 = batch(extract, 'extract', 1);
    await expect(z1.receipt()).rejects.toThrow();
    await expect(e1.receipt()).resolves.toMatchObject({ duplicate: false });
    await Promise.all([zombie.close({ timeoutMs: 0 }), extract.close({ timeoutMs: 2000 })]);
  });

  it('a task’s retry opening the file takes over none of another task’s pending rows', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'shared.db');
    const extract = await open(server, path, 'extract', 1, { relay: 'external' });
    batch(extract, 'extract', 1);
    const load = await open(server, path, 'load', 2);
    await delivered(load);
    batch(extract, 'extract', 2);
    await load.close();
    await extract.close({ timeoutMs: 0 });
    const drain = await open(server, path, 'extract', 1);
    await delivered(drain);
    await drain.close();
    const events = await server.events({ asset: 'batch_ready' });
    expect(events.map((e) => `${e.task}/${e.partitionKey}@${e.attempt}`)).toEqual(['extract/extract-1@1', 'extract/extract-2@1']);
  });

  it('pruning keeps each task’s newest row, so that its stream goes on numbering after it', async () => {
    const server = await startServer();
    let clock = Date.parse('2026-11-30T00:00:00Z');
    const path = join(tempDir(), 'shared.db');
    const opts = { relay: 'manual' as const, now: () => clock, resume: 'never' as const };
    const a = await open(server, path, 'a', 1, opts);
    const b = await open(server, path, 'b', 1, opts);
    a.commit((tx) => tx.emit(a.asset('batch_ready'), { partitionKey: 'a1' }));
    a.commit((tx) => tx.emit(a.asset('batch_ready'), { partitionKey: 'a2' }));
    b.commit((tx) => tx.emit(b.asset('batch_ready'), { partitionKey: 'b1' }));
    while ((await a.relay!.step()) > 0);
    clock += 8 * 24 * 3600_000;
    a.relay!.prune();
    const next = a.commit((tx) => tx.emit(a.asset('batch_ready'), { partitionKey: 'a3' }));
    while ((await a.relay!.step()) > 0);
    await expect(next.receipt()).resolves.toMatchObject({ duplicate: false });
    expect(a.status()).toMatchObject({ dead: 0 });
  });
});
