import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openOutbox, type Outbox } from '../../src/outbox/index.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/** Held emissions (G25): released under the keys they were committed with, and not held again by a reopened attempt that failed for good. */

const quiet = { info() {}, warn() {}, error() {} };
const RUN_ID = 'dag-run';
const progress = z.object({ batch: z.number() });
type Extra = Record<string, unknown>;

function open(server: RunningServer | string, path: string, task: string, attempt: number, extra: Extra = {}): Promise<Outbox> {
  const url = typeof server === 'string' ? server : server.url;
  return openOutbox({ path, server: url, producer: 'orders', run: { workflow: 'dag', runId: RUN_ID, task, attempt }, logger: quiet, ...extra });
}
function batch(box: Outbox, task: string, n: number) {
  return box.commit((tx) => {
    tx.set(box.checkpoint('backlog', progress), { batch: n });
    tx.emit(box.asset('run_done'), { partitionKey: `${task}-${n}`, on: 'success' });
    return tx.emit(box.asset('batch_ready'), { partitionKey: `${task}-${n}` });
  });
}

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
