import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openOutbox, runFromEnvironment, scheduledRun, type RunOptions } from '../../src/outbox/index.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet = { info() {}, warn() {}, error() {} };
const progress = z.object({ batch: z.number().int() });

/** The README's job in small: batches 1 to 3 of its run, each with its event, resuming from its checkpoint. */
async function job(url: string, path: string, run: RunOptions): Promise<{ attempt: number; started: number }> {
  const box = await openOutbox({ path, server: url, producer: 'orders-ingest', run, logger: quiet });
  const backlog = box.checkpoint('backlog', progress);
  const started = (backlog.get()?.batch ?? 0) + 1;
  for (let batch = started; batch <= 3; batch++) {
    box.commit((tx) => {
      tx.set(backlog, { batch });
      tx.emit(box.asset('batch_ready'), { partitionKey: `${box.run!.runId}/batch-${batch}` });
    });
  }
  expect((await box.close()).pending).toBe(0);
  return { attempt: box.run!.attempt, started };
}

describe('a job that takes its run from its schedule', () => {
  it("publishes each day's batches on its day, and a re-run of a day resumes it under the next attempt", async () => {
    const server = await startServer();
    const path = join(tempDir(), 'orders-ingest.db');
    const day = (at: string) => scheduledRun({ workflow: 'orders', task: 'ingest', every: 'day', at: new Date(at) });
    expect(await job(server.url, path, day('2026-12-05T02:00:00Z'))).toEqual({ attempt: 1, started: 1 });
    // The next day is another run: it starts at batch 1, where a hard-coded run id would "resume" and publish nothing.
    expect(await job(server.url, path, day('2026-12-06T02:00:00Z'))).toEqual({ attempt: 1, started: 1 });
    // The first day run again (a person re-runs it): the next attempt, claimed, which resumes after its last batch.
    expect(await job(server.url, path, day('2026-12-05T09:00:00Z'))).toEqual({ attempt: 2, started: 4 });
    const published = (await server.events()).map((event) => event.partitionKey);
    expect(published).toEqual(['2026-12-05/batch-1', '2026-12-05/batch-2', '2026-12-05/batch-3', '2026-12-06/batch-1', '2026-12-06/batch-2', '2026-12-06/batch-3']);
  });

  it("under Airflow, takes the DAG run and the task's try number: a retry on a fresh machine resumes from the server", async () => {
    const server = await startServer();
    const context = { AIRFLOW_CTX_DAG_ID: 'orders', AIRFLOW_CTX_DAG_RUN_ID: 'scheduled__2026-12-05T02:00:00+00:00', AIRFLOW_CTX_TASK_ID: 'ingest' };
    expect(await job(server.url, join(tempDir(), 'a.db'), runFromEnvironment({}, { ...context, AIRFLOW_CTX_TRY_NUMBER: '1' }))).toEqual({ attempt: 1, started: 1 });
    expect(await job(server.url, join(tempDir(), 'b.db'), runFromEnvironment({}, { ...context, AIRFLOW_CTX_TRY_NUMBER: '2' }))).toEqual({ attempt: 2, started: 4 });
    expect(await server.events()).toHaveLength(3);
  });
});
