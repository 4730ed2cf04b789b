import { expect, vi } from 'vitest';
import { z } from 'zod';
import { openOutbox, type Outbox, type OutboxOptions } from '../../src/outbox/index.js';
import type { RunningServer } from './server.js';

/**
 * Tasks of one DAG run, each an outbox of producer `orders`: the tests of tasks sharing a run (and,
 * sometimes, a file) open them, commit batches and wait for delivery through these, so that each test
 * states only what differs between tasks.
 */

export const TASK_RUN = { workflow: 'dag', runId: 'dag-run' } as const;
export const quiet = { info() {}, warn() {}, error() {} };
const progress = z.object({ batch: z.number() });

/** Opens `task`'s attempt of {@link TASK_RUN} on `path`; `extra` overrides any option. */
export function openTask(server: RunningServer | string, path: string, task: string, attempt: number, extra: Partial<OutboxOptions> = {}): Promise<Outbox> {
  const url = typeof server === 'string' ? server : server.url;
  return openOutbox({ path, server: url, producer: 'orders', run: { ...TASK_RUN, task, attempt }, logger: quiet, ...extra });
}

/**
 * One batch of `task`: its checkpoint, a `run_done` held for success and a `batch_ready` event, both
 * partitioned `${task}-${n}` so that a test can tell whose event reached the server.
 */
export function commitBatch(box: Outbox, task: string, n: number) {
  return box.commit((tx) => {
    tx.set(box.checkpoint('backlog', progress), { batch: n });
    tx.emit(box.asset('run_done'), { partitionKey: `${task}-${n}`, on: 'success' });
    return tx.emit(box.asset('batch_ready'), { partitionKey: `${task}-${n}` });
  });
}

/** Resolves once `box` has nothing left to deliver, events and checkpoints alike. */
export const delivered = (box: Outbox) => vi.waitFor(() => expect(box.status()).toMatchObject({ pending: 0, pendingCheckpoints: 0 }), { timeout: 10_000 });

export { progress as batchProgress };
