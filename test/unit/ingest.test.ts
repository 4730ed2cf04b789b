import { describe, expect, it } from 'vitest';
import { newEventIds, planIngest, refuseAttempt } from '../../src/dedupe/ingest/plan.js';
import { existingKeyResult, keyClaims, readsNeeded, replayResult, resolveIngest } from '../../src/dedupe/ingest/resolve.js';
import { checkItem, type CheckedEvent, type CheckedItem, type InvalidItem } from '../../src/dedupe/item-check.js';

/**
 * The server's ingest decisions as pure functions (src/dedupe/ingest/ and item-check.ts): every
 * store runs them, so they are tested here once, with no database.
 */
const key = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const event = (seq: number, n: number, fields: Record<string, unknown> = {}) =>
  checkItem({ seq, key: key(n), kind: 'event', asset: 'batch_ready', partitionKey: `b${seq}`, ...fields }, seq - 1);
const checkpoint = (seq: number, n: number, value: unknown = { batch: seq }) => checkItem({ seq, key: key(n), kind: 'checkpoint', name: 'backlog', value }, seq - 1);
const registered = (asset: string) => asset === 'batch_ready';

describe('checkItem', () => {
  it.each([
    ['null', null],
    ['an array', [1]],
    ['a string', 'x'],
    ['a number', 7],
  ])('refuses %s as an item, without a place in the stream', (_what, raw) => {
    expect(checkItem(raw, 3)).toEqual({ valid: false, seq: null, key: null, field: 'items[3]', detail: 'items[3]: must be an object' });
  });

  it('refuses an item whose seq or key cannot be read, naming the field', () => {
    expect(checkItem({ seq: 0, key: key(1), kind: 'event', asset: 'a' }, 2)).toEqual({
      valid: false,
      seq: null,
      key: null,
      field: 'items[2].seq',
      detail: 'items[2].seq: Too small: expected number to be >=1',
    });
    expect(checkItem({ seq: 1, kind: 'event', asset: 'a' }, 0)).toMatchObject({ valid: false, seq: null, key: null, field: 'items[0].key', detail: 'items[0].key: is required' });
    expect(checkItem({ seq: 'one', key: key(1), kind: 'event', asset: 'a' }, 0)).toMatchObject({
      valid: false,
      seq: null,
      field: 'items[0].seq',
      detail: 'items[0].seq: Invalid input: expected number, received string',
    });
  });

  it('reads a key in either case as its lower-case spelling', () => {
    expect(checkItem({ seq: 1, key: key(1).toUpperCase(), kind: 'event', asset: 'batch_ready' }, 0)).toMatchObject({ valid: true, key: key(1) });
  });

  it('refuses an unknown kind, keeping the item in its place', () => {
    expect(checkItem({ seq: 4, key: key(1), kind: 'evnt' }, 1)).toEqual({
      valid: false,
      seq: 4,
      key: key(1),
      field: 'items[1].kind',
      detail: 'items[1].kind: must be "event" or "checkpoint"',
    });
  });

  it('checks an event payload with the producer rules and suggests the field meant', () => {
    expect(checkItem({ seq: 1, key: key(1), kind: 'event', asset: 'batch_ready', partitionKy: 'x' }, 0)).toEqual({
      valid: false,
      seq: 1,
      key: key(1),
      field: 'items[0].partitionKy',
      detail: 'items[0].partitionKy: unknown field; did you mean "partitionKey"?',
    });
    expect(checkItem({ seq: 1, key: key(1), kind: 'event', asset: 'batch_ready', zzzzzzzzzz: 1 }, 0)).toMatchObject({
      detail: 'items[0].zzzzzzzzzz: unknown field; known fields are seq, key, kind, asset, partitionKey, partitionDate, extra, trace, cause',
    });
    const checked = event(1, 1, { extra: { b: 1, a: [2] } }) as CheckedEvent;
    expect(checked).toEqual({
      valid: true,
      kind: 'event',
      seq: 1,
      key: key(1),
      payload: { asset: 'batch_ready', partitionKey: 'b1', extra: '{"a":[2],"b":1}' },
      fingerprint: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
    });
  });

  it('checks a checkpoint item: a name, a JSON value in canonical form, and a size bound', () => {
    expect(checkpoint(2, 2, { z: 1, a: null })).toEqual({ valid: true, kind: 'checkpoint', seq: 2, key: key(2), name: 'backlog', value: '{"a":null,"z":1}', revision: 0 });
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: 1, revision: 3 }, 0)).toMatchObject({ valid: true, revision: 3 });
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: 1, revision: 0 }, 0)).toMatchObject({ valid: false, field: 'items[0].revision' });
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', value: 1 }, 0)).toMatchObject({ valid: false, seq: 1, field: 'items[0].name', detail: 'items[0].name: is required' });
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: 1, nme: 2 }, 0)).toMatchObject({
      detail: 'items[0].nme: unknown field; did you mean "name"?',
    });
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: 1, zzzzzzzz: 2 }, 0)).toMatchObject({
      detail: 'items[0].zzzzzzzz: unknown field; known fields are seq, key, kind, name, value, revision',
    });
    // A trace context is an event's only: on a checkpoint item it is an unknown field, not dropped.
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: 1, trace: { traceparent: '00' } }, 0)).toMatchObject({
      valid: false,
      field: 'items[0].trace',
    });
    const deep = Array.from({ length: 40 }).reduce<unknown>((inner) => ({ d: inner }), 1);
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: deep }, 0)).toMatchObject({
      valid: false,
      seq: 1,
      field: expect.stringMatching(/^items\[0\]\.value(\.d)+$/),
      detail: expect.stringMatching(/^items\[0\]\.value(\.d)+: nests deeper than \d+ levels; flatten it$/),
    });
    const big = 'x'.repeat(65_536);
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: big.slice(2) }, 0)).toMatchObject({ valid: true });
    expect(checkItem({ seq: 1, key: key(1), kind: 'checkpoint', name: 'x', value: big.slice(1) }, 0)).toEqual({
      valid: false,
      seq: 1,
      key: key(1),
      field: 'items[0].value',
      detail: 'items[0].value: must be at most 65536 bytes as JSON; keep checkpoints small',
    });
  });
});

describe('planIngest', () => {
  it('places items after the last seq, refuses one past a gap, and replays taken positions', () => {
    const items: (CheckedItem | InvalidItem)[] = [event(3, 3), event(4, 4), checkpoint(5, 5), event(7, 7)];
    const plan = planIngest([event(2, 2), ...items], 3, registered);
    expect(plan.lastSeq).toBe(5);
    expect(plan.placements.map((p) => p.type)).toEqual(['replay', 'replay', 'event', 'checkpoint', 'final']);
    expect(plan.placements[0]).toEqual({ type: 'replay', item: event(2, 2), seq: 2, key: key(2) });
    expect(plan.placements[4]).toEqual({ type: 'final', result: { status: 'gap', seq: 7, key: key(7), expectedSeq: 6 } });
  });

  it('gives an item without a readable seq no place, so the next one gaps', () => {
    const plan = planIngest([checkItem({ key: key(1) }, 0), event(1, 2)], 0, registered);
    expect(plan.placements[0]).toEqual({
      type: 'final',
      result: { status: 'rejected', seq: null, key: null, code: 'invalid_item', detail: 'items[0].seq: is required', field: 'items[0].seq' },
    });
    expect(plan.placements[1]).toMatchObject({ type: 'event' });
    const noKey = planIngest([checkItem({ seq: 1 }, 0)], 0, registered);
    expect(noKey.placements[0]).toMatchObject({ type: 'final', result: { status: 'rejected', seq: null } });
    expect(noKey.lastSeq).toBe(0);
  });

  it('records a refused item that took its place: invalid, or of an unregistered asset', () => {
    const plan = planIngest([checkItem({ seq: 1, key: key(1), kind: 'nope' }, 0), event(2, 2, { asset: 'unknown_thing' })], 0, registered);
    expect(plan.lastSeq).toBe(2);
    expect(plan.placements).toEqual([
      {
        type: 'refused',
        result: { status: 'rejected', seq: 1, key: key(1), code: 'invalid_item', detail: 'items[0].kind: must be "event" or "checkpoint"', field: 'items[0].kind' },
      },
      {
        type: 'refused',
        result: {
          status: 'rejected',
          seq: 2,
          key: key(2),
          code: 'unknown_asset',
          detail: 'asset: "unknown_thing" is not registered on this server',
          field: 'asset',
        },
      },
    ]);
  });
});

describe('resolveIngest', () => {
  const ids = (count: number) => Array.from({ length: count }, (_, i) => `id-${i + 1}`);
  const context = { ts: 'now', lastSeqBefore: 2, attempt: 2, epoch: 1 };
  const nothingStored = { outcomes: new Map(), records: new Map() };

  it('claims each new key once, and answers its repeat in the request from the first item there', () => {
    const plan = planIngest([event(3, 3), event(3, 3), event(4, 3, { partitionKey: 'b3' })], 2, registered);
    const claims = keyClaims(plan, ids);
    expect(claims.map((claim) => claim.key)).toEqual([key(3)]);
    const { results, writes } = resolveIngest(plan, { claimed: new Set([key(3)]), ...nothingStored }, claims, context);
    expect(results.map((r) => r.status)).toEqual(['accepted', 'duplicate', 'duplicate']);
    expect(results[1]).toEqual({ status: 'duplicate', seq: 3, key: key(3), eventId: 'id-1', timestamp: 'now' });
    expect(writes.events).toEqual([{ item: event(3, 3), eventId: 'id-1', lineage: { causedBy: null, depth: 0, ancestors: [] } }]);
    expect(writes).toMatchObject({ lastSeq: 4, epoch: 2, outcomes: [] });
  });

  it('answers a key it did not claim from the record stored before, and records a conflict', () => {
    const plan = planIngest([event(3, 3, { extra: { other: true } })], 2, registered);
    const stored = { fingerprint: (event(3, 3) as CheckedEvent).fingerprint, eventId: 'old', ts: 'then' };
    const { results, writes } = resolveIngest(plan, { claimed: new Set(), outcomes: new Map(), records: new Map([[key(3), stored]]) }, keyClaims(plan, ids), context);
    expect(results[0]).toMatchObject({ status: 'conflict', code: 'key_conflict' });
    expect(writes.events).toEqual([]);
    expect(writes.outcomes).toEqual([{ seq: 3, key: key(3), status: 'conflict', code: 'key_conflict', detail: (results[0] as { detail: string }).detail, field: null }]);
  });

  it('replays a position taken earlier in the same request from what that item recorded', () => {
    const refused = event(3, 3, { asset: 'unknown_thing' });
    const plan = planIngest([refused, refused, checkpoint(4, 4), checkpoint(4, 4)], 2, registered);
    const { results, writes } = resolveIngest(plan, { claimed: new Set(), ...nothingStored }, [], context);
    expect(results[1]).toEqual(results[0]);
    expect(results.slice(2)).toEqual([
      { status: 'checkpointed', seq: 4, key: key(4) },
      { status: 'checkpointed', seq: 4, key: key(4) },
    ]);
    expect(writes.outcomes.map((o) => [o.seq, o.status])).toEqual([
      [3, 'rejected'],
      [4, 'checkpointed'],
    ]);
  });

  it('writes the newest value of each checkpoint, and moves neither seq nor epoch for a request that took no position', () => {
    const plan = planIngest([checkpoint(3, 3, { batch: 1 }), event(4, 4), checkpoint(5, 5, { batch: 2 })], 2, registered);
    const { writes } = resolveIngest(plan, { claimed: new Set([key(4)]), ...nothingStored }, keyClaims(plan, ids), context);
    expect(writes.checkpoints).toEqual([{ name: 'backlog', value: '{"batch":2}', seq: 5, revision: 0 }]);
    const replayOnly = planIngest([event(2, 2)], 2, registered);
    expect(resolveIngest(replayOnly, { claimed: new Set(), ...nothingStored }, [], context).writes).toMatchObject({ lastSeq: null, epoch: null });
  });

  it('revises a checkpoint update at a position taken before only when the producer rewrote it (revision above 0)', () => {
    const revised = (revision: number) => checkItem({ seq: 2, key: key(2), kind: 'checkpoint', name: 'backlog', value: { batch: 9 }, ...(revision ? { revision } : {}) }, 0);
    const recorded = { outcomes: new Map([[2, { key: key(2), status: 'checkpointed' as const, code: '', detail: '', field: null }]]), records: new Map() };
    const resolve = (item: CheckedItem | InvalidItem) => resolveIngest(planIngest([item], 2, registered), { claimed: new Set(), ...recorded }, [], context);
    expect(resolve(revised(3)).writes.revisions).toEqual([{ name: 'backlog', value: '{"batch":9}', seq: 2, revision: 3 }]);
    expect(resolve(revised(0)).writes.revisions).toEqual([]);
    // Another update at that position is a reuse of it, revision or not: nothing is revised.
    const stranger = checkItem({ seq: 2, key: key(7), kind: 'checkpoint', name: 'backlog', value: 1, revision: 4 }, 0);
    expect(resolve(stranger).results[0]).toMatchObject({ code: 'sequence_reused' });
    expect(resolve(stranger).writes.revisions).toEqual([]);
  });

  it('writes the higher revision of an update sent twice at a new position in one request', () => {
    const at3 = (revision: number, batch: number) => checkItem({ seq: 3, key: key(3), kind: 'checkpoint', name: 'backlog', value: { batch }, ...(revision ? { revision } : {}) }, 0);
    for (const [first, second] of [[at3(1, 1), at3(2, 2)], [at3(2, 2), at3(1, 1)]]) {
      const { writes } = resolveIngest(planIngest([first!, second!], 2, registered), { claimed: new Set(), ...nothingStored }, [], context);
      expect(writes.checkpoints).toEqual([{ name: 'backlog', value: '{"batch":2}', seq: 3, revision: 2 }]);
      expect(writes.revisions).toEqual([]);
    }
  });

  it('reads only positions taken before the request, and only keys it did not claim', () => {
    const plan = planIngest([event(1, 1), event(3, 3), event(3, 5), event(4, 4)], 2, registered);
    expect(readsNeeded(plan, 2, new Set([key(3)]))).toEqual({ seqs: [1], keys: [key(1), key(5), key(4)] });
  });
});

describe('answers to a taken position', () => {
  const record = { fingerprint: (event(1, 1) as CheckedEvent).fingerprint, eventId: 'e1', ts: 't1' };

  it('replay what was recorded there for this key', () => {
    const item = event(1, 1);
    expect(replayResult(item, 1, key(1), { key: key(1), status: 'checkpointed', code: '', detail: '', field: null }, undefined)).toEqual({ status: 'checkpointed', seq: 1, key: key(1) });
    expect(replayResult(item, 1, key(1), { key: key(1), status: 'conflict', code: 'key_conflict', detail: 'd', field: null }, undefined)).toEqual({
      status: 'conflict',
      seq: 1,
      key: key(1),
      code: 'key_conflict',
      detail: 'd',
    });
    expect(replayResult(item, 1, key(1), { key: key(1), status: 'rejected', code: 'unknown_asset', detail: 'd', field: 'asset' }, undefined)).toEqual({
      status: 'rejected',
      seq: 1,
      key: key(1),
      code: 'unknown_asset',
      detail: 'd',
      field: 'asset',
    });
    expect(replayResult(item, 1, key(1), { key: key(1), status: 'rejected', code: 'invalid_item', detail: 'd', field: null }, undefined)).toEqual({
      status: 'rejected',
      seq: 1,
      key: key(1),
      code: 'invalid_item',
      detail: 'd',
    });
  });

  it('answer an event stored with this payload as a duplicate with its receipt', () => {
    expect(replayResult(event(1, 1), 1, key(1), undefined, record)).toEqual({ status: 'duplicate', seq: 1, key: key(1), eventId: 'e1', timestamp: 't1' });
  });

  it('refuse another item at a taken position as sequence_reused', () => {
    const reused = {
      status: 'rejected',
      seq: 1,
      key: key(1),
      code: 'sequence_reused',
      detail: "seq 1 of this stream was already taken by another item; a stream's sequence numbers must not be reused",
      field: 'seq',
    };
    // An outcome recorded for another key, an invalid item, a checkpoint.
    expect(replayResult(event(1, 1), 1, key(1), { key: key(9), status: 'checkpointed', code: '', detail: '', field: null }, record)).toEqual(reused);
    // Its own key stored with another payload is a conflict, as at a new position: the same mistake, the same code.
    expect(replayResult(event(1, 1, { partitionKey: 'other' }), 1, key(1), undefined, record)).toMatchObject({ status: 'conflict', code: 'key_conflict', seq: 1, key: key(1) });
    expect(replayResult(checkItem({ seq: 1, key: key(1), kind: 'nope' }, 0), 1, key(1), undefined, record)).toEqual(reused);
    expect(replayResult(checkpoint(1, 1), 1, key(1), undefined, { ...record, fingerprint: 'x' })).toEqual(reused);
    expect(replayResult(event(1, 1), 1, key(1), undefined, undefined)).toEqual(reused);
  });

  it('answer a key already stored: a duplicate with the same payload, a conflict with another', () => {
    const item = event(4, 1, { partitionKey: 'b1' }) as CheckedEvent;
    expect(existingKeyResult(item, record)).toEqual({ status: 'duplicate', seq: 4, key: key(1), eventId: 'e1', timestamp: 't1' });
    expect(existingKeyResult(item, { ...record, fingerprint: 'other' })).toEqual({
      status: 'conflict',
      seq: 4,
      key: key(1),
      code: 'key_conflict',
      detail: `key ${key(1)} was stored before with a different payload (event e1); a re-run must emit the same asset, partition and extra for the same key, or use a new key`,
    });
  });

  it('take any attempt from the epoch up to maxAttemptStep above it', () => {
    expect(refuseAttempt([event(1, 1)], 2, 2, 10)).toBeUndefined();
    expect(refuseAttempt([event(1, 1)], 12, 2, 10)).toBeUndefined();
    expect(refuseAttempt([event(1, 1)], 10, 0, 10)).toBeUndefined();
  });

  it('refuse an attempt more than maxAttemptStep above the epoch, without a place in the stream', () => {
    const detail =
      "stream.attempt: 13 is more than 10 above this run's highest attempt (2); a retry raises the attempt by one, and taking this one " +
      "would fence every later attempt of the run for good. Send the real try number (or raise the server's maxAttemptStep)";
    expect(refuseAttempt([event(1, 1), checkItem(null, 1)], 13, 2, 10)).toEqual([
      { status: 'rejected', seq: 1, key: key(1), code: 'attempt_too_high', detail, field: 'stream.attempt' },
      { status: 'rejected', seq: null, key: null, code: 'attempt_too_high', detail, field: 'stream.attempt' },
    ]);
  });

  it('fence every item of an older attempt', () => {
    expect(refuseAttempt([event(1, 1), checkItem(null, 1)], 1, 2, 1000)).toEqual([
      { status: 'fenced', seq: 1, key: key(1), code: 'fenced', epoch: 2, detail: 'fenced by attempt 2: attempt 1 of this run may deliver nothing more' },
      { status: 'fenced', seq: null, key: null, code: 'fenced', epoch: 2, detail: 'fenced by attempt 2: attempt 1 of this run may deliver nothing more' },
    ]);
  });
});

describe('newEventIds', () => {
  it('gives distinct UUIDv7s, as many as asked', () => {
    const ids = newEventIds(50);
    expect(ids).toHaveLength(50);
    expect(new Set(ids).size).toBe(50);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(newEventIds(0)).toEqual([]);
  });
});
