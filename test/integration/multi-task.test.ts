import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FencedError, LifecycleAsset, openOutbox } from '../../src/outbox/index.js';
import { startServer } from '../support/server.js';
import { batchProgress as progress, commitBatch as batch, delivered, openTask as open, quiet, TASK_RUN } from '../support/task-runs.js';
import { tempDir } from '../support/temp.js';

/**
 * A run's identity is (producer, workflow, run, task): two tasks of one DAG run commit at once, in one
 * outbox file or in a file each, with attempts, retries and fences of their own. Nothing of one task
 * (its stream position, epoch, checkpoint, fence or held emissions) may leak into the other's.
 */

const RUN_ID = TASK_RUN.runId;

describe.each([
  ['in one outbox file', true],
  ['in a file each', false],
] as const)('two tasks of one run at once, %s', (_layout, shared) => {
  it('keep their own positions, checkpoints, retries, fences and held emissions', async () => {
    const server = await startServer();
    const extractFile = join(tempDir(), 'extract.db');
    const loadFile = shared ? extractFile : join(tempDir(), 'load.db');
    const extract = await open(server, extractFile, 'extract', 1);
    const load = await open(server, loadFile, 'load', 1);
    // Interleaved: extract runs four batches, load three, commit by commit.
    for (let n = 1; n <= 4; n++) {
      batch(extract, 'extract', n);
      if (n <= 3) batch(load, 'load', n);
    }
    await Promise.all([delivered(extract), delivered(load)]);
    // Each reads its own progress, though both name their checkpoint "backlog".
    expect([extract.checkpoint('backlog', progress).get(), load.checkpoint('backlog', progress).get()]).toEqual([{ batch: 4 }, { batch: 3 }]);

    // extract fails with a retry to come; load's attempt 1 stalls (a zombie) and its retry starts on
    // another machine, resuming load's own checkpoint.
    extract.fail(new Error('source timeout'), undefined, { willRetry: true });
    await extract.close();
    const loadRetry = await open(server, join(tempDir(), 'load-fresh.db'), 'load', 2);
    expect(loadRetry.checkpoint('backlog', progress).get()).toEqual({ batch: 3 });
    expect(loadRetry.status().held).toBe(3);
    await batch(loadRetry, 'load', 4).receipt();
    // The zombie's next batch is fenced by load's retry, at the server.
    await expect(batch(load, 'load', 99).receipt()).rejects.toBeInstanceOf(FencedError);
    await load.close({ timeoutMs: 0 });

    // extract's retry, on its own file, is not fenced by load's: it resumes extract's own checkpoint and holds.
    const extractRetry = await open(server, extractFile, 'extract', 2);
    expect(extractRetry.checkpoint('backlog', progress).get()).toEqual({ batch: 4 });
    await batch(extractRetry, 'extract', 5).receipt();
    extractRetry.complete();
    loadRetry.complete();
    await Promise.all([extractRetry.close(), loadRetry.close()]);

    const events = await server.events();
    const ofTask = (task: string, asset: string) => events.filter((e) => e.task === task && e.asset === asset).map((e) => `${e.partitionKey}@${e.attempt}`);
    expect(ofTask('extract', 'batch_ready')).toEqual(['extract-1@1', 'extract-2@1', 'extract-3@1', 'extract-4@1', 'extract-5@2']);
    expect(ofTask('load', 'batch_ready')).toEqual(['load-1@1', 'load-2@1', 'load-3@1', 'load-4@2']);
    // Each task releases its own held emissions, once, with its own success.
    expect(ofTask('extract', 'run_done').map((p) => p.split('@')[0])).toEqual(['extract-1', 'extract-2', 'extract-3', 'extract-4', 'extract-5']);
    expect(ofTask('load', 'run_done').map((p) => p.split('@')[0])).toEqual(['load-1', 'load-2', 'load-3', 'load-4']);
    expect(ofTask('extract', LifecycleAsset.Failed)).toEqual(['null@1']);
    expect(events.filter((e) => e.asset === LifecycleAsset.Succeeded).map((e) => e.task).sort()).toEqual(['extract', 'load']);
    const states = await Promise.all(['extract', 'load'].map((task) => server.server.store.streamState('orders', RUN_ID, task)));
    expect(states.map((state) => ({ epoch: state?.epoch, backlog: state?.checkpoints.backlog }))).toEqual([
      { epoch: 2, backlog: { batch: 5 } },
      { epoch: 2, backlog: { batch: 4 } },
    ]);
  });
});

describe('a file shared by runs and tasks', () => {
  it("starts a new run from scratch on the file of an earlier run, and a run's retry from its own checkpoint", async () => {
    const server = await startServer();
    const path = join(tempDir(), 'daily.db');
    const yesterday = await openOutbox({ path, server: server.url, producer: 'orders', run: { workflow: 'orders', runId: '2026-11-30', task: 'ingest', attempt: 1 }, logger: quiet });
    for (let n = 1; n <= 3; n++) batch(yesterday, 'ingest', n);
    await yesterday.close();
    const today = await openOutbox({ path, server: server.url, producer: 'orders', run: { workflow: 'orders', runId: '2026-12-01', task: 'ingest', attempt: 1 }, logger: quiet });
    expect(today.checkpoint('backlog', progress).get()).toBeUndefined();
    batch(today, 'ingest', 1);
    await today.close();
    const retried = await openOutbox({ path, server: server.url, producer: 'orders', run: { workflow: 'orders', runId: '2026-11-30', task: 'ingest', attempt: 2 }, logger: quiet });
    expect(retried.checkpoint('backlog', progress).get()).toEqual({ batch: 3 });
    await retried.close();
    expect((await server.events({ asset: 'batch_ready' })).map((e) => `${e.runId}/${e.partitionKey}`)).toEqual([
      '2026-11-30/ingest-1',
      '2026-11-30/ingest-2',
      '2026-11-30/ingest-3',
      '2026-12-01/ingest-1',
    ]);
  });

  it('gives each task its own event for a partition both emit, and a task emitting it again its first receipt', async () => {
    // Every task of a DAG run reports day 2026-12-01 done: three events, one per task, never one
    // taken for another's duplicate.
    const server = await startServer();
    const path = join(tempDir(), 'shared.db');
    const receipts = [];
    for (const task of ['extract', 'load', 'notify']) {
      const box = await open(server, path, task, 1);
      receipts.push(await box.asset('batch_ready').emit({ partitionKey: '2026-12-01' }));
      await box.close();
    }
    expect(receipts.map((receipt) => receipt.duplicate)).toEqual([false, false, false]);
    expect(new Set(receipts.map((receipt) => receipt.eventId)).size).toBe(3);
    // A re-run of one task's attempt emitting it again is that task's duplicate.
    const again = await open(server, path, 'load', 2);
    const repeat = await again.asset('batch_ready').emit({ partitionKey: '2026-12-01' });
    await again.close();
    expect(repeat).toMatchObject({ eventId: receipts[1]!.eventId, duplicate: true });
    expect((await server.events({ asset: 'batch_ready' })).map((e) => e.task)).toEqual(['extract', 'load', 'notify']);
  });

  it("resumes a task's retry from the server on a file that only another task wrote to", async () => {
    const server = await startServer();
    // load's attempt 1 ran on a machine that is gone; extract wrote to the file that load's retry opens.
    const gone = await open(server, join(tempDir(), 'gone.db'), 'load', 1);
    for (let n = 1; n <= 2; n++) batch(gone, 'load', n);
    await gone.close();
    const shared = join(tempDir(), 'shared.db');
    const extract = await open(server, shared, 'extract', 1);
    batch(extract, 'extract', 1);
    await extract.close();
    const load = await open(server, shared, 'load', 2);
    expect(load.checkpoint('backlog', progress).get()).toEqual({ batch: 2 });
    // Its success releases what load held, never what extract holds in the same file.
    load.complete();
    await load.close();
    expect((await server.events({ asset: 'run_done' })).map((e) => `${e.task}/${e.partitionKey}`)).toEqual(['load/load-1', 'load/load-2']);
  });
});
