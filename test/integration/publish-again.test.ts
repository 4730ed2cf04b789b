import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openOutbox, type Outbox } from '../../src/outbox/index.js';
import { runScript } from '../support/child.js';
import { RUN } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet = { info() {}, warn() {}, error() {} };
const progress = z.object({ day: z.number().int() });

/** The job: days after its checkpoint up to `last`, each a `ready` event to `asset` and a `done` one, with the checkpoint. */
function runDays(box: Outbox, asset: string, last: number): void {
  const backlog = box.checkpoint('backlog', progress);
  for (let day = (backlog.get()?.day ?? 0) + 1; day <= last; day++) {
    box.commit((tx) => {
      tx.set(backlog, { day });
      tx.emit(box.asset(asset), { partitionKey: `day-${day}` });
      tx.emit(box.asset('day_done'), { partitionKey: `day-${day}` });
    });
  }
}

/*
 * docs/runbook.md, "Publish partitions again": a run whose events were refused (a misspelt asset the
 * server did not know) moved its checkpoint past them. Its next attempt sets the checkpoint back, in a
 * commit, and does those days again: what was published is answered as a duplicate (same keys), what was
 * refused or never emitted is published now, once.
 */
describe('publishing partitions again on purpose', () => {
  it('rewinds the checkpoint in the next attempt: the refused days are published once, and nothing published before is published twice', async () => {
    const server = await startServer({ assets: ['sales_loaded', 'day_done'] });
    const path = join(tempDir(), 'job.db');
    const first = await openOutbox({ path, server: server.url, producer: 'sales-job', run: RUN, logger: quiet });
    runDays(first, 'sales_laoded', 3);
    expect(await first.close()).toMatchObject({ pending: 0, dead: 3 });
    expect(first.status().deadRows.map((row) => row.code)).toEqual(['unknown_asset', 'unknown_asset', 'unknown_asset']);

    // The spelling fixed, the next attempt sets the checkpoint back to before the first refused day.
    const again = await openOutbox({ path, server: server.url, producer: 'sales-job', run: { ...RUN, attempt: 2 }, logger: quiet });
    again.commit((tx) => tx.set(again.checkpoint('backlog', progress), { day: 0 }));
    runDays(again, 'sales_loaded', 3);
    expect(await again.close()).toMatchObject({ pending: 0, dead: 3 });
    // The misspelt rows are dropped on the record: their days are published under the right asset now.
    const discarded = await runScript('src/cli/main.ts', ['dead', 'discard', path, '--all', '--note', 'published again to sales_loaded']);
    expect(discarded.code, discarded.stderr).toBe(0);
    expect((await runScript('src/cli/main.ts', ['status', path])).code).toBe(0);

    const events = await server.events();
    const count = (asset: string) => events.filter((event) => event.asset === asset).map((event) => event.partitionKey);
    expect(count('sales_loaded')).toEqual(['day-1', 'day-2', 'day-3']);
    // Done again with the same keys: answered as duplicates, stored once.
    expect(count('day_done')).toEqual(['day-1', 'day-2', 'day-3']);
  });
});
