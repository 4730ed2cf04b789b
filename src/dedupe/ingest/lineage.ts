import { RejectionCode } from '../../protocol/errors.js';
import type { IngestPlan, Placement } from './plan.js';

/** One event in a lineage: its asset and partition key. */
export type Ancestor = readonly [asset: string, partitionKey: string | null];

/** What the store keeps of an event's lineage: what caused it, how deep, and every event above it. */
export interface EventLineage {
  /** The id of the event it responds to; null for a producer's own event. */
  causedBy: string | null;
  depth: number;
  /** The events above it, first cause first; empty for a producer's own event. */
  ancestors: readonly Ancestor[];
}

/** A stored event as a cause: itself and its own lineage. */
export interface CauseEvent {
  eventId: string;
  asset: string;
  partitionKey: string | null;
  ancestors: readonly Ancestor[];
}

/** How deep a chain of consumers' emissions may go, and which assets may cycle. */
export interface LineagePolicy {
  /** The deepest an event may be (0 is a producer's own). */
  maxDepth: number;
  /**
   * Assets whose events may repeat an asset and partition of their lineage (a cycle over dates, say),
   * each with its own depth limit instead of maxDepth.
   */
  cycles: ReadonlyMap<string, number>;
}

export const DEFAULT_MAX_LINEAGE_DEPTH = 16;
export const DEFAULT_LINEAGE_POLICY: LineagePolicy = { maxDepth: DEFAULT_MAX_LINEAGE_DEPTH, cycles: new Map() };
export const ROOT_LINEAGE: EventLineage = { causedBy: null, depth: 0, ancestors: [] };

/** The cursors of the causes that the plan's new events name. */
export function causesNeeded(plan: IngestPlan): number[] {
  const cursors = new Set<number>();
  for (const placement of plan.placements) {
    if (placement.type === 'event' && placement.item.cause) cursors.add(placement.item.cause.cursor);
  }
  return [...cursors];
}

/**
 * Places each new event in its lineage, and refuses, at the position it took, one that would repeat an
 * asset and partition of its own lineage (a feedback loop) or go deeper than its limit. A cause the
 * store does not hold (compacted, or never there) starts a new lineage: the event is treated as a root.
 */
export function placeInLineage(plan: IngestPlan, causes: ReadonlyMap<number, CauseEvent>, policy: LineagePolicy): IngestPlan {
  const placements = plan.placements.map((placement): Placement => {
    if (placement.type !== 'event' || !placement.item.cause) return placement;
    const cause = causes.get(placement.item.cause.cursor);
    if (!cause) return placement;
    const { item } = placement;
    const { asset } = item.payload;
    const partitionKey = item.payload.partitionKey ?? null;
    const ancestors: Ancestor[] = [...cause.ancestors, [cause.asset, cause.partitionKey]];
    const cycleLimit = policy.cycles.get(asset);
    const refuse = (code: RejectionCode, detail: string): Placement => ({
      type: 'refused',
      result: { status: 'rejected', seq: item.seq, key: item.key, code, detail, field: 'cause' },
    });
    if (cycleLimit === undefined && ancestors.some(([a, p]) => a === asset && p === partitionKey)) {
      const chain = [...ancestors, [asset, partitionKey] as const].map(describe).join(' → ');
      return refuse(
        RejectionCode.FeedbackLoop,
        `cause: this event would repeat ${describe([asset, partitionKey])} of its own lineage (${chain}); a consumer that emits what it ` +
          `consumes would trigger itself forever. Emit another asset or partition, or allow the cycle on the server (lineage.cycles: { "${asset}": <depth limit> })`,
      );
    }
    const limit = cycleLimit ?? policy.maxDepth;
    if (ancestors.length > limit) {
      return refuse(
        RejectionCode.LineageTooDeep,
        `cause: this event would be ${ancestors.length} emissions deep (first cause ${describe(ancestors[0]!)}), more than the ${limit} ` +
          `this server allows for "${asset}"; raise lineage.maxDepth${cycleLimit === undefined ? '' : ` or lineage.cycles["${asset}"]`} if the chain is meant to be this long`,
      );
    }
    return { type: 'event', item, lineage: { causedBy: cause.eventId, depth: ancestors.length, ancestors } };
  });
  return { ...plan, placements };
}

function describe([asset, partitionKey]: Ancestor): string {
  return partitionKey === null ? `"${asset}"` : `"${asset}"/"${partitionKey}"`;
}
