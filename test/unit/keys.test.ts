import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { deriveKey, explicitKey, type EmissionIdentity } from '../../src/outbox/keys.js';
import { RUN, testOutbox } from '../support/outbox.js';

const identity: EmissionIdentity = {
  producer: 'orders-ingest',
  workflow: 'orders',
  runId: '2026-11-30',
  task: 'ingest',
  asset: 'batch_ready',
  partitionKey: 'batch-0041',
  position: null,
  occurrence: 0,
};

describe('idempotency keys', () => {
  it('are UUIDv5 and fixed for a given identity, so a re-run anywhere derives the same key', () => {
    // A literal on purpose (cross-checked with Python's uuid.uuid5 over the documented name): if the
    // derivation ever changes, re-runs would stop deduplicating against events already stored.
    expect(deriveKey(identity)).toBe('70f43ae5-eb43-5da9-9c6d-dd3cc354e70d');
    expect(explicitKey('orders-ingest', 'my-key')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('are the same in a separate process', () => {
    const script = `import { deriveKey } from './src/outbox/keys.ts'; console.log(deriveKey(${JSON.stringify(identity)}));`;
    const output = execFileSync('npx', ['tsx', '--eval', script], { encoding: 'utf8' }).trim();
    expect(output).toBe(deriveKey(identity));
  });

  it('differ for identities that differ in any part', () => {
    const part = fc.record({
      producer: fc.string({ maxLength: 6 }),
      workflow: fc.string({ maxLength: 6 }),
      runId: fc.string({ maxLength: 6 }),
      task: fc.option(fc.string({ maxLength: 6 })),
      asset: fc.string({ maxLength: 6 }),
      partitionKey: fc.option(fc.string({ maxLength: 6 })),
      position: fc.option(fc.string({ maxLength: 6 })),
      occurrence: fc.nat(3),
    });
    fc.assert(
      fc.property(part, part, (a, b) => {
        const same = JSON.stringify(a) === JSON.stringify(b);
        expect(deriveKey(a) === deriveKey(b)).toBe(same);
      }),
      { numRuns: 2000, seed: 20261130 },
    );
  });

  it('leave the attempt out: attempt 2 re-emitting a batch derives attempt 1 key', async () => {
    const first = await testOutbox({ run: { ...RUN, attempt: 1 } });
    const second = await testOutbox({ run: { ...RUN, attempt: 2 } });
    const keyOf = (box: typeof first) =>
      box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-0041' })).key;
    expect(keyOf(first)).toBe(keyOf(second));
  });

  it('use the checkpoint written in the same commit for an emission without a partition key', async () => {
    const box = await testOutbox();
    const { z } = await import('zod');
    const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
    const asset = box.asset('run_done');
    const at = (batch: number) =>
      box.commit((tx) => {
        tx.set(progress, { batch });
        return tx.emit(asset, { extra: { batch } });
      }).key;
    const k1 = at(1);
    const k2 = at(2);
    expect(k1).not.toBe(k2);
    expect(k1).toBe(
      deriveKey({ ...identity, asset: 'run_done', partitionKey: null, position: '{"backlog":"{\\"batch\\":1}"}', occurrence: 0 }),
    );
  });
});
