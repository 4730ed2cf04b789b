import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { checkItem } from '../../src/dedupe/item-check.js';
import { batchHeaders, encodeBatch } from '../../src/outbox/relay/batch-encoding.js';
import type { OutboxRow } from '../../src/outbox/file/schema.js';
import { emissionBatchSchema } from '../../src/protocol/wire.js';
import { testOutbox } from '../support/outbox.js';

/**
 * The relay writes each request body by hand (encodeBatch splices stored JSON rather than parse and
 * serialise it again), so nothing but this test holds that body to the wire schema: a column added to
 * the outbox and forgotten here, or spliced wrongly, would otherwise reach the server unseen.
 */
describe('the body the relay sends for a batch', () => {
  it('is a batch the server reads back field for field: events with and without their optional parts, and checkpoint updates at each revision', async () => {
    const box = await testOutbox();
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    box.commit((tx) => {
      tx.set(progress, { batch: 1 });
      tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-1', partitionDate: '2026-12-01T00:00:00+01:00', extra: { rows: 10, note: 'a "quoted" \u2028 value' } });
      tx.emit(box.asset('batch_ready'), {});
    });
    box.commit((tx) => {
      tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-2' });
      tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-2b', key: 'order-17' });
    });
    // Checkpoint-only commits with no emission after them coalesce into one row, revised past 0.
    box.commit((tx) => tx.set(progress, { batch: 2 }));
    box.commit((tx) => tx.set(progress, { batch: 3 }));
    const rows = box.file.db.prepare('SELECT * FROM outbox ORDER BY id').all() as OutboxRow[];
    expect(rows.map((row) => `${row.kind}${row.revision > 0 ? ' revised' : ''}`)).toEqual(['event', 'event', 'checkpoint', 'event', 'event', 'checkpoint revised']);
    const stream = { producer: 'orders-ingest', workflow: 'orders', runId: '2026-11-30', task: 'ingest', attempt: 1 };

    const body = JSON.parse(encodeBatch(stream, rows)) as unknown;
    const batch = emissionBatchSchema.parse(body);
    expect(batch.stream).toEqual(stream);
    const checked = batch.items.map((item, index) => checkItem(item, index));
    expect(checked.filter((item) => !item.valid)).toEqual([]);
    expect(checked).toMatchObject([
      {
        kind: 'event',
        seq: 1,
        key: rows[0]!.key,
        payload: { asset: 'batch_ready', partitionKey: 'batch-1', partitionDate: '2026-12-01T00:00:00+01:00', extra: JSON.stringify({ note: 'a "quoted" \u2028 value', rows: 10 }) },
        fingerprint: rows[0]!.fingerprint,
      },
      { kind: 'event', seq: 2, key: rows[1]!.key, payload: { asset: 'batch_ready' }, fingerprint: rows[1]!.fingerprint },
      { kind: 'checkpoint', seq: 3, key: rows[2]!.key, name: 'backlog', value: '{"batch":1}', revision: 0 },
      { kind: 'event', seq: 4, key: rows[3]!.key, payload: { asset: 'batch_ready', partitionKey: 'batch-2' }, fingerprint: rows[3]!.fingerprint },
      { kind: 'event', seq: 5, key: rows[4]!.key, payload: { asset: 'batch_ready', partitionKey: 'batch-2b' }, fingerprint: rows[4]!.fingerprint },
      { kind: 'checkpoint', seq: 6, key: rows[5]!.key, name: 'backlog', value: '{"batch":3}', revision: rows[5]!.revision },
    ]);
    // A key derived from the run and a partition is the run's alone, and said so in a header (which an older
    // server ignores); the key of an emission without a partition (derived from the commit's position), an
    // explicit key and a checkpoint update's are not.
    expect(batchHeaders(rows)).toEqual({ 'oncebox-run-keys': '0,3' });
    expect(batchHeaders(rows.filter((row) => row.kind === 'checkpoint'))).toEqual({});
  });
});
