import { describe, expect, it } from 'vitest';
import { placeInLineage, type CauseEvent } from '../../src/dedupe/ingest/lineage.js';
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
const causes = new Map<number, CauseEvent>([
  [1, { eventId: 'e1', asset: 'a', partitionKey: 'p', ancestors: [] }],
  [2, { eventId: 'e2', asset: 'b', partitionKey: 'p', ancestors: [['a', 'p']] }],
  [3, { eventId: 'e3', asset: 'daily', partitionKey: 'd', ancestors: [['daily', 'd'], ['daily', 'd'], ['daily', 'd']] }],
  [4, { eventId: 'e4', asset: 'b', partitionKey: 'p2', ancestors: [['a', 'x'], ['a', 'y']] }],
]);

describe('placeInLineage', () => {
  it('extends the cause lineage, and leaves a producer event and an unknown cause at the root', () => {
    const placed = placeInLineage(plan(event(1, 'b', 'p', 1), event(2, 'x', undefined), event(3, 'x', 'q', 99)), causes, policy);
    expect(placed.placements.map((p) => (p.type === 'event' ? p.lineage ?? 'root' : p.type))).toEqual([
      { causedBy: 'e1', depth: 1, ancestors: [['a', 'p']] },
      'root',
      'root',
    ]);
  });

  it('refuses a repeat of an asset and partition of the lineage, whatever the depth, but not another partition', () => {
    const placed = placeInLineage(plan(event(1, 'a', 'p', 1), event(2, 'a', 'other', 1), event(3, 'a', undefined, 1)), causes, policy);
    expect(placed.placements.map((p) => (p.type === 'refused' ? p.result.code : p.type))).toEqual(['feedback_loop', 'event', 'event']);
  });

  it('refuses a chain deeper than the limit, and lets an allowed cycle repeat itself to its own limit', () => {
    const placed = placeInLineage(plan(event(1, 'c', 'p', 4), event(2, 'c', 'q', 2), event(3, 'daily', 'd', 3)), causes, policy);
    expect(placed.placements.map((p) => (p.type === 'refused' ? p.result.code : p.type === 'event' ? p.lineage?.depth : p.type))).toEqual([
      'lineage_too_deep',
      2,
      'lineage_too_deep',
    ]);
    const shallower = new Map(causes).set(3, { eventId: 'e3', asset: 'daily', partitionKey: 'd', ancestors: [['daily', 'd']] });
    const allowed = placeInLineage(plan(event(1, 'daily', 'd', 3)), shallower, policy).placements[0]!;
    expect(allowed.type === 'event' && allowed.lineage).toEqual({ causedBy: 'e3', depth: 2, ancestors: [['daily', 'd'], ['daily', 'd']] });
  });

  it('leaves every placement but a new event with a cause as it was', () => {
    const final = { type: 'final' as const, result: { status: 'gap' as const, seq: 5, key: 'k', expectedSeq: 2 } };
    const plain = { type: 'event' as const, item: event(2, 'a', 'p') };
    const placed = placeInLineage({ placements: [final, plain], lastSeq: 2 }, causes, policy);
    expect(placed.placements[0]).toBe(final);
    expect(placed.placements[1]).toBe(plain);
  });

  it('names the loop, the limit and the setting to change in its refusals', () => {
    const [loop, deep, deepCycle] = placeInLineage(plan(event(1, 'b', null as unknown as undefined, 1), event(2, 'c', undefined, 4), event(3, 'daily', 'd', 3)), new Map(causes).set(1, { eventId: 'e1', asset: 'b', partitionKey: null, ancestors: [] }), policy).placements;
    expect(loop).toMatchObject({
      type: 'refused',
      result: {
        code: 'feedback_loop',
        field: 'cause',
        detail:
          'cause: this event would repeat "b" of its own lineage ("b" → "b"); a consumer that emits what it consumes would trigger itself forever. ' +
          'Emit another asset or partition, or allow the cycle on the server (lineage.cycles: { "b": <depth limit> })',
      },
    });
    expect(deep).toMatchObject({
      result: {
        code: 'lineage_too_deep',
        detail: 'cause: this event would be 3 emissions deep (first cause "a"/"x"), more than the 2 this server allows for "c"; raise lineage.maxDepth if the chain is meant to be this long',
      },
    });
    expect(deepCycle).toMatchObject({
      result: {
        code: 'lineage_too_deep',
        detail:
          'cause: this event would be 4 emissions deep (first cause "daily"/"d"), more than the 3 this server allows for "daily"; raise lineage.maxDepth or lineage.cycles["daily"] if the chain is meant to be this long',
      },
    });
  });
});
