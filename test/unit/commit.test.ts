import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AsyncCommitError,
  KeyConflictError,
  NoRunContextError,
  openOutbox,
  OutboxClosedError,
  type CommitTransaction,
} from '../../src/outbox/index.js';
import { deriveKey, explicitKey } from '../../src/outbox/commit/keys.js';
import { EmissionValidationError, NotCommittedError } from '../../src/outbox/index.js';
import { RUN, testOutbox } from '../support/outbox.js';
import { tempDir } from '../support/temp.js';

describe('commit', () => {
  it('writes checkpoints and emissions together, in order, with consecutive sequence numbers', async () => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    const asset = box.asset('batch_ready');
    box.commit((tx) => {
      tx.set(progress, { batch: 2 });
      tx.emit(asset, { partitionKey: 'batch-1' });
      tx.emit(asset, { partitionKey: 'batch-2', extra: { rows: 3 } });
    });
    const rows = box.file.db.prepare('SELECT seq, kind, partition_key, extra, checkpoint_name, checkpoint_value FROM outbox ORDER BY id').all();
    // The checkpoint update follows the emissions it accounts for, in the same stream.
    expect(rows).toEqual([
      { seq: 1, kind: 'event', partition_key: 'batch-1', extra: null, checkpoint_name: null, checkpoint_value: null },
      { seq: 2, kind: 'event', partition_key: 'batch-2', extra: '{"rows":3}', checkpoint_name: null, checkpoint_value: null },
      { seq: 3, kind: 'checkpoint', partition_key: null, extra: null, checkpoint_name: 'backlog', checkpoint_value: '{"batch":2}' },
    ]);
    expect(progress.get()).toEqual({ batch: 2 });
  });

  it('counts emissions of one asset and partition per cause, so that processing one event again alone derives its keys again', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    const [a, b] = [{ eventId: 'event-a', cursor: 1, scope: null }, { eventId: 'event-b', cursor: 2, scope: null }];
    const fired = { ...b, scope: 'trigger-1' };
    const caused = (tx: CommitTransaction, cause: typeof a | typeof fired) => tx.emitCaused(asset, { partitionKey: 'p' }, cause);
    const first = box.commit((tx) => [caused(tx, a), caused(tx, b), caused(tx, fired)]);
    expect(new Set(first.map((emission) => emission.key)).size).toBe(3);
    // Event b processed again alone (after a crash, on a fresh machine): the same keys, each the second of its commit no more.
    const again = box.commit((tx) => [caused(tx, b), caused(tx, fired)]);
    expect(again.map((emission) => emission.key)).toEqual([first[1]!.key, first[2]!.key]);
    // A trigger's firing for event b counts apart from the handler's emissions for it: fired again alone, the same key.
    expect(box.commit((tx) => caused(tx, fired)).key).toBe(first[2]!.key);
  });

  it('writes nothing when the callback throws', async () => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    const asset = box.asset('batch_ready');
    expect(() =>
      box.commit((tx) => {
        tx.set(progress, { batch: 1 });
        tx.emit(asset, { partitionKey: 'batch-1' });
        throw new Error('storage write failed');
      }),
    ).toThrow('storage write failed');
    expect(progress.get()).toBeUndefined();
    expect(box.status().pending).toBe(0);
    // The sequence numbers the failed commit would have taken are still free.
    box.commit((tx) => tx.emit(asset, { partitionKey: 'batch-1' }));
    expect(box.file.db.prepare('SELECT seq FROM outbox').pluck().all()).toEqual([1]);
  });

  it.each([
    ['the checkpoint table', "CREATE TRIGGER fail_write BEFORE INSERT ON checkpoints WHEN NEW.value = '{\"batch\":2}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"],
    ['the checkpoint update row', "CREATE TRIGGER fail_write BEFORE INSERT ON outbox WHEN NEW.kind = 'checkpoint' AND NEW.checkpoint_value = '{\"batch\":2}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"],
    ['the emission row', "CREATE TRIGGER fail_write BEFORE INSERT ON outbox WHEN NEW.partition_key = 'batch-2' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"],
  ])('writes nothing of a commit whose write to %s fails: never an emission without its checkpoint', async (_what, trigger) => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    const asset = box.asset('batch_ready');
    const commitBatch = (batch: number) =>
      box.commit((tx) => {
        tx.set(progress, { batch });
        tx.emit(asset, { partitionKey: `batch-${batch}` });
      });
    commitBatch(1);
    box.file.db.exec(trigger);
    expect(() => commitBatch(2)).toThrow('injected failure');
    expect(progress.get()).toEqual({ batch: 1 });
    const rows = box.file.db.prepare('SELECT kind, partition_key, checkpoint_value FROM outbox ORDER BY id').all();
    expect(rows).toEqual([
      { kind: 'event', partition_key: 'batch-1', checkpoint_value: null },
      { kind: 'checkpoint', partition_key: null, checkpoint_value: '{"batch":1}' },
    ]);
  });

  it('refuses a commit callback that is not a function, with a typed error naming it', async () => {
    const box = await testOutbox();
    expect(() => box.commit('emit' as never)).toThrow(expect.objectContaining({ code: 'invalid_option', field: 'fn', message: 'commit(fn): fn must be a function (tx) => { … }, not string' }));
  });

  it('refuses an async callback and writes nothing', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    expect(() => box.commit((async (tx: CommitTransaction) => tx.emit(asset, { partitionKey: 'a' })) as never)).toThrow(AsyncCommitError);
    expect(() => box.commit((tx) => Promise.resolve(tx.emit(asset, { partitionKey: 'b' })))).toThrow(
      'commit(fn): fn returned a promise. A commit is one synchronous SQLite transaction; do the async work (e.g. writing the batch) before commit() and keep fn synchronous.',
    );
    expect(box.status().pending).toBe(0);
  });

  it('catches the same emission re-committed with a different payload, and writes nothing', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    box.commit((tx) => tx.emit(asset, { partitionKey: 'batch-41', extra: { rows: 10 } }));
    let error: unknown;
    try {
      box.commit((tx) => {
        tx.emit(asset, { partitionKey: 'batch-42' });
        tx.emit(asset, { partitionKey: 'batch-41', extra: { rows: 11 } });
      });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(KeyConflictError);
    expect((error as KeyConflictError).code).toBe('key_conflict');
    expect((error as Error).message).toMatch(
      /^asset "batch_ready" partition "batch-41" was committed before with a different payload \(outbox row 1, committed .+\)\. A re-run must emit the same partitionDate and extra for the same emission; if this is a different event, give it its own partition key or an explicit key\.$/,
    );
    expect(box.status().pending).toBe(1);
  });

  it('keeps one row for the same emission committed twice, whatever the key order of extra', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    const first = box.commit((tx) => tx.emit(asset, { partitionKey: 'batch-41', extra: { a: 1, b: { c: 2, d: 3 } } }));
    const again = box.commit((tx) => tx.emit(asset, { partitionKey: 'batch-41', extra: { b: { d: 3, c: 2 }, a: 1 } }));
    expect(again.key).toBe(first.key);
    expect(box.status().pending).toBe(1);
  });

  // Each scope of key has its own index (outbox migration 007): a partition's, the file's, a stream position's.
  it.each([
    ['a partition key', { partitionKey: 'batch-41' }],
    ['an explicit key', { key: 'load-41' }],
    ['only its position in the job', {}],
  ])('catches an emission keyed by %s committed again, as the same or as a conflict', async (_what, identity) => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    const commit = (rows: number) =>
      box.commit((tx) => {
        tx.set(progress, { batch: 41 });
        return tx.emit(box.asset('batch_ready'), { ...identity, extra: { rows } });
      });
    const first = commit(1);
    expect(commit(1).key).toBe(first.key);
    expect(() => commit(2)).toThrow(KeyConflictError);
    expect(box.file.db.prepare("SELECT count(*) FROM outbox WHERE kind = 'event'").pluck().get()).toBe(1);
  });

  it('coalesces consecutive checkpoint-only commits into the waiting update: the newest wins, none moves past an emission', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    const progress = box.checkpoint('progress', z.object({ batch: z.number() }));
    const other = box.checkpoint('other', z.object({ n: z.number() }));
    const rows = () =>
      box.file.db.prepare('SELECT seq, kind, checkpoint_name AS name, checkpoint_value AS value, revision FROM outbox ORDER BY seq').all();
    box.commit((tx) => {
      tx.set(progress, { batch: 1 });
      tx.emit(asset, { partitionKey: 'batch-1' });
    });
    for (const batch of [2, 3]) box.commit((tx) => tx.set(progress, { batch }));
    box.commit((tx) => tx.set(other, { n: 1 }));
    box.commit((tx) => tx.set(progress, { batch: 4 }));
    expect(rows()).toEqual([
      { seq: 1, kind: 'event', name: null, value: null, revision: 0 },
      { seq: 2, kind: 'checkpoint', name: 'progress', value: '{"batch":4}', revision: 3 },
      { seq: 3, kind: 'checkpoint', name: 'other', value: '{"n":1}', revision: 0 },
    ]);
    // An emission ends the run of checkpoint-only commits: what follows it is a new update.
    box.commit((tx) => tx.emit(asset, { partitionKey: 'batch-5' }));
    box.commit((tx) => tx.set(progress, { batch: 5 }));
    expect(rows().slice(3)).toEqual([
      { seq: 4, kind: 'event', name: null, value: null, revision: 0 },
      { seq: 5, kind: 'checkpoint', name: 'progress', value: '{"batch":5}', revision: 0 },
    ]);
    expect(box.checkpoint('progress', z.object({ batch: z.number() })).get()).toEqual({ batch: 5 });
  });

  it('scopes an explicit key to the producer and checks it like a derived one', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    const a = box.commit((tx) => tx.emit(asset, { key: 'load-2026-11-30', extra: { n: 1 } }));
    expect(() => box.commit((tx) => tx.emit(asset, { key: 'load-2026-11-30', extra: { n: 2 } }))).toThrow(
      /^key "load-2026-11-30" was committed before with a different payload/,
    );
    expect(a.key).not.toBe('load-2026-11-30');
  });

  it('catches an explicit key committed again with another partition: it is unique in the whole file', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    box.commit((tx) => tx.emit(asset, { key: 'load-7', partitionKey: 'a' }));
    expect(() => box.commit((tx) => tx.emit(asset, { key: 'load-7', partitionKey: 'b' }))).toThrow(KeyConflictError);
  });

  it('refuses to emit without a run context, or after close', async () => {
    const path = join(tempDir(), 'o.db');
    const reader = await openOutbox({ path, producer: 'p', relay: 'external' });
    expect(() => reader.commit((tx) => tx.emit(reader.asset('batch_ready')))).toThrow(NoRunContextError);
    expect(() => reader.commit((tx) => tx.emit(reader.asset('batch_ready')))).toThrow(
      `${path}: opened without a run context; pass run: { workflow, runId, attempt } to openOutbox to commit or emit`,
    );
    await reader.close();
    const box = await testOutbox();
    await box.close();
    expect(() => box.commit(() => undefined)).toThrow(OutboxClosedError);
    await expect(box.asset('batch_ready').emit({ partitionKey: 'x' })).rejects.toMatchObject({ code: 'outbox_closed' });
  });

  it('refuses a tx used after its commit ended', async () => {
    const box = await testOutbox();
    let leaked: CommitTransaction | undefined;
    box.commit((tx) => {
      leaked = tx;
    });
    expect(() => leaked!.emit(box.asset('batch_ready'))).toThrow(
      expect.objectContaining({ code: 'commit_ended', message: 'tx.emit(): this commit has already ended; use tx only inside the commit callback' }),
    );
  });

  it('refuses tx.set used after its commit ended, naming the method', async () => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    let leaked: CommitTransaction | undefined;
    box.commit((tx) => {
      leaked = tx;
    });
    expect(() => leaked!.set(progress, { batch: 1 })).toThrow('tx.set(): this commit has already ended; use tx only inside the commit callback');
  });

  it("has no key or receipt for an emission until its commit has returned", async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    let keyInside: unknown;
    let receiptInside: Promise<unknown> | undefined;
    const emission = box.commit((tx) => {
      const handle = tx.emit(asset, { partitionKey: 'b1' });
      try {
        keyInside = handle.key;
      } catch (error) {
        keyInside = error;
      }
      receiptInside = handle.receipt();
      receiptInside.catch(() => undefined);
      return handle;
    });
    expect(keyInside).toBeInstanceOf(NotCommittedError);
    expect(keyInside).toMatchObject({ code: 'not_committed', message: 'emission.key: the commit has not returned yet; read the key after commit() returns' });
    await expect(receiptInside).rejects.toThrow(new NotCommittedError('emission.receipt(): call it after commit() has returned'));
    await expect(receiptInside).rejects.toMatchObject({ code: 'not_committed' });
    expect(emission.key).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('derives each key from the identity: partition, occurrence in the commit, checkpoint position, explicit key', async () => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    const asset = box.asset('batch_ready');
    const identity = { producer: 'orders-ingest', workflow: RUN.workflow, runId: RUN.runId, task: RUN.task, asset: 'batch_ready' };
    const keys = box.commit((tx) => {
      tx.set(progress, { batch: 1 });
      return [
        tx.emit(asset, { partitionKey: 'p1' }),
        tx.emit(asset, { partitionKey: 'p1' }),
        tx.emit(asset, { partitionKey: 'p2' }),
        tx.emit(asset),
        tx.emit(asset, { key: 'mine' }),
      ];
    }).map((emission) => emission.key);
    expect(keys).toEqual([
      deriveKey({ ...identity, partitionKey: 'p1', position: null, occurrence: 0 }),
      deriveKey({ ...identity, partitionKey: 'p1', position: null, occurrence: 1 }),
      deriveKey({ ...identity, partitionKey: 'p2', position: null, occurrence: 0 }),
      deriveKey({ ...identity, partitionKey: null, position: '{"backlog":"{\\"batch\\":1}"}', occurrence: 0 }),
      explicitKey('orders-ingest', 'mine'),
    ]);
    // Without a checkpoint in the commit, an emission without a partition has no position.
    expect(box.commit((tx) => tx.emit(box.asset('run_done'))).key).toBe(deriveKey({ ...identity, asset: 'run_done', partitionKey: null, position: null, occurrence: 0 }));
  });

  it('stores each field of an emission, and numbers several checkpoint updates of one commit in turn', async () => {
    const box = await testOutbox();
    const a = box.checkpoint('a', z.number());
    const b = box.checkpoint('b', z.number());
    box.commit((tx) => {
      tx.emit(box.asset('batch_ready'), { partitionKey: 'p', partitionDate: '2026-11-30T00:00:00Z', extra: { n: 1 } });
      tx.set(a, 1);
      tx.set(b, 2);
    });
    box.commit((tx) => tx.set(a, 3));
    expect(box.file.db.prepare('SELECT seq, kind, asset, partition_key, partition_date, extra, checkpoint_name, checkpoint_value FROM outbox ORDER BY id').all()).toEqual([
      { seq: 1, kind: 'event', asset: 'batch_ready', partition_key: 'p', partition_date: '2026-11-30T00:00:00Z', extra: '{"n":1}', checkpoint_name: null, checkpoint_value: null },
      // The checkpoint-only commit rewrote the waiting update of a: no emission follows it.
      { seq: 2, kind: 'checkpoint', asset: '', partition_key: null, partition_date: null, extra: null, checkpoint_name: 'a', checkpoint_value: '3' },
      { seq: 3, kind: 'checkpoint', asset: '', partition_key: null, partition_date: null, extra: null, checkpoint_name: 'b', checkpoint_value: '2' },
    ]);
  });

  it('refuses an emission that is not an object', async () => {
    const box = await testOutbox();
    for (const input of ['batch-1', null, ['x']]) {
      expect(() => box.commit((tx) => tx.emit(box.asset('batch_ready'), input as never))).toThrow(
        new EmissionValidationError('emission', 'emission: must be an object such as { partitionKey: "batch-0042" }'),
      );
    }
  });

  it('names the asset alone in a conflict of an emission without a partition', async () => {
    const box = await testOutbox();
    const asset = box.asset('run_done');
    box.commit((tx) => tx.emit(asset, { extra: { n: 1 } }));
    expect(() => box.commit((tx) => tx.emit(asset, { extra: { n: 2 } }))).toThrow(/^asset "run_done" was committed before with a different payload \(outbox row 1,/);
  });
});
