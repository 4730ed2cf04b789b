import { openOutbox } from '../src/outbox/index.js';
import { partitionDateOf, partitionKeyOf } from './batch.js';
import { QUIET_LOGGER, type Tenant, type World } from './world.js';

/**
 * A re-run of a task's first batches under a run of its own (a backfill, a fix re-run by hand), on a fresh
 * machine: each batch's `ready` now and `done` held, then success. Its partitions are ones the task's run
 * publishes too, so the trigger sees a newer event for a partition it may have fired for (G22: ignored),
 * and the summariser a new event to summarise (G20).
 */
export async function rerunBatches(world: World, tenant: Tenant, task: string, batches: number, runId: string): Promise<void> {
  const box = await openOutbox({
    path: world.newPath(`${tenant.name}-${runId}`),
    server: world.proxy.url,
    token: tenant.tokens.job,
    producer: `${tenant.name}-job`,
    run: { workflow: 'sim', runId, task, attempt: 1 },
    durability: 'normal',
    now: () => world.clock,
    logger: QUIET_LOGGER,
  });
  for (let batch = 1; batch <= batches; batch++) {
    const partitionKey = partitionKeyOf(task, batch, tenant.sharedPartitions);
    box.commit((tx) => {
      tx.emit(box.asset(tenant.assets.ready), { partitionKey, partitionDate: partitionDateOf(batch) });
      tx.emit(box.asset(tenant.assets.done), { partitionKey, on: 'success' });
    });
  }
  box.complete();
  const closed = await box.close({ timeoutMs: 60_000 });
  if (closed.pending > 0) throw new Error(`the re-run ${runId} of ${tenant.name}/${task} left ${closed.pending} rows undelivered`);
  world.happened('a re-run published partitions again');
}
