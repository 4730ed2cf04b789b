import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CheckpointValidationError, openOutbox } from '../../src/outbox/index.js';
import { RUN, testOutbox } from '../support/outbox.js';
import { tempDir } from '../support/temp.js';

describe('checkpoints', () => {
  it('round-trip a typed value through the file, across a reopen', async () => {
    const path = join(tempDir(), 'outbox.db');
    const options = { path, producer: 'p', run: RUN, server: 'http://127.0.0.1:9', relay: 'manual' as const };
    const schema = z.object({ batch: z.number().int(), cursor: z.string(), done: z.array(z.number()) });
    const first = await openOutbox(options);
    const progress = first.checkpoint('backlog', schema);
    expect(progress.get()).toBeUndefined();
    first.commit((tx) => tx.set(progress, { batch: 41, cursor: 'abc', done: [1, 2] }));
    expect(progress.get()).toEqual({ batch: 41, cursor: 'abc', done: [1, 2] });
    await first.close();

    const second = await openOutbox(options);
    expect(second.checkpoint('backlog', schema).get()).toEqual({ batch: 41, cursor: 'abc', done: [1, 2] });
    await second.close();
  });

  it('are at most 63 names per job (the server keeps 64 per run, one of them the producer\'s own), refused with the fix named', async () => {
    const box = await testOutbox();
    const names = Array.from({ length: 63 }, (_, i) => `part_${i}`);
    for (const name of names) box.checkpoint(name, z.number());
    // A name defined again is the same checkpoint, not a new one.
    expect(box.checkpoint('part_0', z.number()).name).toBe('part_0');
    expect(() => box.checkpoint('part_63', z.number())).toThrow(
      expect.objectContaining({ code: 'invalid_option', field: 'name', message: expect.stringContaining('at most 63 checkpoints') }),
    );
  });

  it('keep the last value set in one commit', async () => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    box.commit((tx) => {
      tx.set(progress, { batch: 1 });
      tx.set(progress, { batch: 2 });
    });
    expect(progress.get()).toEqual({ batch: 2 });
  });

  it('are validated on write, and a refused write leaves the commit unwritten', async () => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number().int() }));
    box.commit((tx) => tx.set(progress, { batch: 1 }));
    let error: unknown;
    try {
      box.commit((tx) => {
        tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-2' });
        tx.set(progress, { batch: 'two' } as never);
      });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(CheckpointValidationError);
    expect(error).toMatchObject({
      code: 'invalid_checkpoint',
      checkpoint: 'backlog',
      field: 'value.batch',
      message:
        'checkpoint "backlog": value.batch: Invalid input: expected number, received string; pass a value that matches the schema given to box.checkpoint()',
    });
    expect(progress.get()).toEqual({ batch: 1 });
    expect(box.status().pending).toBe(0);
  });

  it('are validated on read, when the schema no longer matches what was committed', async () => {
    const box = await testOutbox();
    box.commit((tx) => tx.set(box.checkpoint('backlog', z.object({ batch: z.number() })), { batch: 1 }));
    const renamed = box.checkpoint('backlog', z.object({ offset: z.number() }));
    expect(() => renamed.get()).toThrowError(
      'checkpoint "backlog": stored value.offset: is required; the schema no longer matches what an earlier version committed; give box.checkpoint() a schema that also reads the old value and converts it, ' +
        'z.union([newSchema, oldSchema.transform(toNew)]), or start afresh under a new checkpoint name (docs/operations.md, "When a checkpoint\'s schema changes")',
    );
  });
});
