import { partitionKeyOf, RUN_ID } from './batch.js';
import { live, type SimTask } from './jobs.js';
import type { Scene } from './scene.js';
import { expect } from './violation.js';
import type { Tenant } from './world.js';

/**
 * G3 across the streams of one file: the live tasks of a tenant whose attempts share a file commit
 * batches in turn (two back to back each, so that one request may hold two of a stream's events, then
 * one each), and the file delivers. The server must store the new events in the order they were
 * committed: within a request, in its stream's order; across the file's streams, in commit order.
 */
export async function commitInTurn(scene: Scene, tenant: Tenant): Promise<void> {
  const byFile = new Map<string, SimTask[]>();
  for (const task of scene.tasks.filter((candidate) => candidate.tenant === tenant && live(candidate.current) && !candidate.current.ended)) {
    byFile.set(task.current.path, [...(byFile.get(task.current.path) ?? []), task]);
  }
  const mates = [...byFile.values()].find((tasks) => tasks.length > 1);
  if (mates === undefined) return;
  const newest = await scene.world.newestCursor(tenant.assets.ready);
  const committed: string[] = [];
  for (const task of [...mates.flatMap((mate) => [mate, mate]), ...mates]) {
    const batch = task.commit(task.current);
    // The task beside the partition: where a run's tasks share their partitions, the key alone is not one batch.
    if (batch !== undefined) committed.push(`${task.name} ${partitionKeyOf(task.name, batch.batch, tenant.sharedPartitions)}`);
  }
  await scene.deliverAll(mates.map((mate) => mate.current));
  const stored: string[] = [];
  for (let after = newest, page; (page = await scene.world.server.store.listEvents({ asset: tenant.assets.ready, after, limit: 1000 })).events.length > 0; after = page.next) {
    stored.push(...page.events.filter((event) => event.producer === mates[0]!.producer && event.runId === RUN_ID).map((event) => `${event.task} ${event.partitionKey!}`));
  }
  // What was pending before is delivered first, and is not compared; a batch the server had already (a
  // task behind it, redoing it) is answered as a duplicate, not stored anew.
  const ours = stored.filter((partition) => committed.includes(partition));
  const order = committed.filter((partition) => ours.includes(partition));
  expect('G3', JSON.stringify(ours) === JSON.stringify(order), () => `${tenant.name}: batches committed on one file in the order ${JSON.stringify(committed)}, stored in the order ${JSON.stringify(ours)}`);
  scene.world.happened('tasks sharing a file committed in turn');
}
