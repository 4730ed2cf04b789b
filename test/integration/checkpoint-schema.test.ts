import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CheckpointValidationError } from '../../src/outbox/index.js';
import { RUN, testOutbox } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/*
 * A job's checkpoint changes shape between versions of the job: version 1 kept `{ batch }`, version 2
 * keeps `{ batch, rows }`. The remedy the refusal prints, applied as docs/operations.md shows it: a schema
 * that reads both shapes and converts the old one.
 */
const v1 = z.object({ batch: z.number().int() });
const v2 = z.object({ batch: z.number().int(), rows: z.number().int() });
const v2ReadingV1 = z.union([v2, v1.transform((old) => ({ batch: old.batch, rows: 0 }))]);

describe("a checkpoint's schema that changes between versions of a job", () => {
  it('is refused as it was written by the new schema alone, and read through a schema that converts the old shape: the job resumes where it was, on its file and on a fresh machine', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'outbox.db');
    // Version 1: batches 1 to 3, each with its event.
    const first = await testOutbox({ path, server: server.url });
    const progressV1 = first.checkpoint('progress', v1);
    for (let batch = 1; batch <= 3; batch++) {
      first.commit((tx) => {
        tx.set(progressV1, { batch });
        tx.emit(first.asset('batch_ready'), { partitionKey: `batch-${batch}` });
      });
    }
    expect((await first.close()).pending).toBe(0);

    // Version 2 with its new schema alone: the stored value is refused, with the remedy named.
    const retry = { ...RUN, attempt: 2 };
    const second = await testOutbox({ path, server: server.url, run: retry });
    let refusal: unknown;
    try {
      second.checkpoint('progress', v2).get();
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toBeInstanceOf(CheckpointValidationError);
    expect((refusal as Error).message).toContain('z.union([newSchema, oldSchema.transform(toNew)])');
    expect((refusal as Error).message).toContain(`docs/operations.md, "When a checkpoint's schema changes"`);

    // The remedy: a schema that reads the old shape too. The job goes on at batch 4 and writes the new shape.
    const progress = second.checkpoint('progress', v2ReadingV1);
    expect(progress.get()).toEqual({ batch: 3, rows: 0 });
    for (let batch = progress.get()!.batch + 1; batch <= 5; batch++) {
      second.commit((tx) => {
        tx.set(progress, { batch, rows: batch * 10 });
        tx.emit(second.asset('batch_ready'), { partitionKey: `batch-${batch}` });
      });
    }
    expect(progress.get()).toEqual({ batch: 5, rows: 50 });
    expect((await second.close()).pending).toBe(0);

    // A third attempt on a fresh machine reads the server's copy, in the new shape, through the same schema.
    const fresh = await testOutbox({ path: join(tempDir(), 'outbox.db'), server: server.url, run: { ...RUN, attempt: 3 } });
    expect(fresh.checkpoint('progress', v2ReadingV1).get()).toEqual({ batch: 5, rows: 50 });
    await fresh.close();
    expect((await server.events()).map((event) => event.partitionKey)).toEqual(['batch-1', 'batch-2', 'batch-3', 'batch-4', 'batch-5']);
  });

  it('read on a fresh machine from the server in its old shape goes through the converting schema as well', async () => {
    const server = await startServer();
    const first = await testOutbox({ path: join(tempDir(), 'outbox.db'), server: server.url });
    first.commit((tx) => tx.set(first.checkpoint('progress', v1), { batch: 7 }));
    expect((await first.close()).pending).toBe(0);
    const fresh = await testOutbox({ path: join(tempDir(), 'outbox.db'), server: server.url, run: { ...RUN, attempt: 2 } });
    expect(() => fresh.checkpoint('progress', v2).get()).toThrow(CheckpointValidationError);
    expect(fresh.checkpoint('progress', v2ReadingV1).get()).toEqual({ batch: 7, rows: 0 });
  });
});
