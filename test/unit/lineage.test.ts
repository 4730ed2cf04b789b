import { describe, expect, it } from 'vitest';
import { ancestorOf, LINEAGE_KEPT, placeInLineage, type CauseEvent } from '../../src/dedupe/ingest/lineage.js';
import { toCauseEvent } from '../../src/dedupe/tables.js';
import type { IngestPlan } from '../../src/dedupe/ingest/plan.js';
import type { CheckedEvent } from '../../src/dedupe/item-check.js';

function event(seq: number, asset: string, partitionKey: string | undefined, cursor?: number): CheckedEvent {
  return {
    valid: true,
    kind: 'event',
    seq,
    key: `00000000-0000-4000-8000-00000000000${seq}`,
    payload: { asset, ...(partitionKey === undefined ? {} : { partitionKey }) },
    fingerprint: `f${seq}`,
    ...(cursor === undefined ? {} : { cause: { cursor } }),
  };
}

const plan = (...items: CheckedEvent[]): IngestPlan => ({ placements: items.map((item) => ({ type: 'event', item })), lastSeq: items.length });
const policy = { maxDepth: 2, cycles: new Map([['daily', 3]]) };
const anyCause = () => true;
const $ = ancestorOf;
const causes = new Map<number, CauseEvent>([
  [1, { eventId: 'e1', asset: 'a', partitionKey: 'p', depth: 0, ancestors: [] }],
  [2, { eventId: 'e2', asset: 'b', partitionKey: 'p', depth: 1, ancestors: [$('a', 'p')] }],
  [3, { eventId: 'e3', asset: 'daily', partitionKey: 'd', depth: 3, ancestors: [$('daily', 'd'), $('daily', 'd'), $('daily', 'd')] }],
  [4, { eventId: 'e4', asset: 'b', partitionKey: 'p2', depth: 2, ancestors: [$('a', 'x'), $('a', 'y')] }],
]);

describe('placeInLineage', () => {
  it('extends the cause lineage, and leaves a producer event and an unknown cause at the root', () => {
    const placed = placeInLineage(plan(event(1, 'b', 'p', 1), event(2, 'x', undefined), event(3, 'x', 'q', 99)), causes, policy, anyCause);
    expect(placed.placements.map((p) => (p.type === 'event' ? p.lineage ?? 'root' : p.type))).toEqual([
      { causedBy: 'e1', depth: 1, ancestors: [$('a', 'p')] },
      'root',
      'root',
    ]);
  });

  it('keeps digests of the asset and partition, 8 characters each, never the names', () => {
    expect($('a', 'p')).toMatch(/^[A-Za-z0-9_-]{8}$/);
    expect($('a', 'p')).not.toBe($('a', null));
    expect($('a', 'p')).not.toBe($('p', 'a'));
    // A lineage stored as [asset, partition] pairs before digests is read as digests.
    expect(toCauseEvent({ event_id: 'e', asset: 'b', partition_key: 'q', depth: 1, lineage: JSON.stringify([['a', 'p']]) }).ancestors).toEqual([$('a', 'p')]);
  });

  it('keeps at most LINEAGE_KEPT ancestors, the nearest, and counts the depth exactly beyond them', () => {
    const deep: CauseEvent = { eventId: 'deep', asset: 'daily', partitionKey: 'd40', depth: 40, ancestors: Array.from({ length: LINEAGE_KEPT }, (_, i) => $('daily', `d${i + 8}`)) };
    const placed = placeInLineage(plan(event(1, 'daily', 'd41', 1)), new Map([[1, deep]]), { maxDepth: 16, cycles: new Map([['daily', 100]]) }, anyCause).placements[0]!;
    expect(placed.type === 'event' && placed.lineage).toEqual({ causedBy: 'deep', depth: 41, ancestors: [...deep.ancestors.slice(1), $('daily', 'd40')] });
  });

  it('refuses a repeat of an asset and partition of the lineage, whatever the depth, but not another partition', () => {
    const placed = placeInLineage(plan(event(1, 'a', 'p', 1), event(2, 'a', 'other', 1), event(3, 'a', undefined, 1)), causes, policy, anyCause);
    expect(placed.placements.map((p) => (p.type === 'refused' ? p.result.code : p.type))).toEqual(['feedback_loop', 'event', 'event']);
  });

  it('refuses a chain deeper than the limit, and lets an allowed cycle repeat itself to its own limit', () => {
    const placed = placeInLineage(plan(event(1, 'c', 'p', 4), event(2, 'c', 'q', 2), event(3, 'daily', 'd', 3)), causes, policy, anyCause);
    expect(placed.placements.map((p) => (p.type === 'refused' ? p.result.code : p.type === 'event' ? p.lineage?.depth : p.type))).toEqual([
      'lineage_too_deep',
      2,
      'lineage_too_deep',
    ]);
    const shallower = new Map(causes).set(3, { eventId: 'e3', asset: 'daily', partitionKey: 'd', depth: 1, ancestors: [$('daily', 'd')] });
    const allowed = placeInLineage(plan(event(1, 'daily', 'd', 3)), shallower, policy, anyCause).placements[0]!;
    expect(allowed.type === 'event' && allowed.lineage).toEqual({ causedBy: 'e3', depth: 2, ancestors: [$('daily', 'd'), $('daily', 'd')] });
  });

  it('refuses a cause of an asset the token may not name as a cause, without naming it', () => {
    const placed = placeInLineage(plan(event(1, 'b', 'p', 1), event(2, 'c', 'p', 2)), causes, policy, (asset) => asset === 'b');
    expect(placed.placements.map((p) => (p.type === 'refused' ? p.result.code : p.type))).toEqual(['forbidden', 'event']);
    const refused = placed.placements[0]!;
    expect(refused.type === 'refused' && refused.result).toMatchObject({
      field: 'cause',
      detail:
        'cause: event 1 is not one this token may name as a cause; a cause must be an event of an asset the token consumes (oncebox token create --scope publish --producers … --consumes ASSET)',
    });
  });

  it('leaves every placement but a new event with a cause as it was', () => {
    const final = { type: 'final' as const, result: { status: 'gap' as const, seq: 5, key: 'k', expectedSeq: 2 } };
    const plain = { type: 'event' as const, item: event(2, 'a', 'p') };
    const placed = placeInLineage({ placements: [final, plain], lastSeq: 2 }, causes, policy, anyCause);
    expect(placed.placements[0]).toBe(final);
    expect(placed.placements[1]).toBe(plain);
  });

  it('names the event, the limit and the setting to change in its refusals, and nothing of the lineage above its cause', () => {
    const [loop, deep, deepCycle] = placeInLineage(
      plan(event(1, 'b', null as unknown as undefined, 1), event(2, 'c', undefined, 4), event(3, 'daily', 'd', 3)),
      new Map(causes).set(1, { eventId: 'e1', asset: 'b', partitionKey: null, depth: 0, ancestors: [] }),
      policy,
      anyCause,
    ).placements;
    expect(loop).toMatchObject({
      type: 'refused',
      result: {
        code: 'feedback_loop',
        field: 'cause',
        detail:
          'cause: this event ("b") would repeat an asset and partition of its own lineage above event 1; a consumer that emits what it consumes would trigger itself forever. ' +
          'Emit another asset or partition, or allow the cycle on the server (lineage.cycles: { "b": <depth limit> })',
      },
    });
    expect(deep).toMatchObject({
      result: {
        code: 'lineage_too_deep',
        detail: 'cause: this event would be 3 emissions deep, more than the 2 this server allows for "c"; raise lineage.maxDepth if the chain is meant to be this long',
      },
    });
    expect(deepCycle).toMatchObject({
      result: {
        code: 'lineage_too_deep',
        detail:
          'cause: this event would be 4 emissions deep, more than the 3 this server allows for "daily"; raise lineage.maxDepth or lineage.cycles["daily"] if the chain is meant to be this long',
      },
    });
    // A huge partition key of the caller's own is echoed cut short.
    const huge = 'k'.repeat(500);
    const [long] = placeInLineage(plan(event(1, 'a', huge, 1)), new Map(causes).set(1, { eventId: 'e1', asset: 'a', partitionKey: huge, depth: 0, ancestors: [] }), policy, anyCause).placements;
    expect(long!.type === 'refused' && long!.result.detail.length).toBeLessThan(400);
  });
});
