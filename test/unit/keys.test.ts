import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkpointKey, deriveKey, explicitKey, type EmissionIdentity } from '../../src/outbox/commit/keys.js';
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
    // The same for an explicit key and a checkpoint update's key (python3: uuid.uuid5(namespace,
    // json.dumps(parts, separators=(',', ':')))), so that each kind of key stays apart from the others.
    expect(explicitKey('orders-ingest', 'my-key')).toBe('43b3db19-d738-51e3-b941-ec09b64b8adb');
    expect(checkpointKey('orders-ingest', { ...RUN, attempt: 2 }, 7)).toBe('0329d44e-d2ac-5457-82ff-fd39763bfc3b');
    expect(checkpointKey('orders-ingest', { workflow: RUN.workflow, runId: RUN.runId, attempt: 2 }, 7)).toBe('a7af2a59-9f53-5ab9-ac27-f01c1543d589');
  });

  it('scope an explicit key by producer, so two producers picking the same key do not swallow each other', () => {
    expect(explicitKey('orders-ingest', 'my-key')).not.toBe(explicitKey('billing', 'my-key'));
    expect(explicitKey('orders-ingest', 'my-key')).not.toBe(explicitKey('orders-ingest', 'other-key'));
  });

  it('are the same in a separate process', () => {
    const script = `import { deriveKey } from './src/outbox/commit/keys.ts'; console.log(deriveKey(${JSON.stringify(identity)}));`;
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
