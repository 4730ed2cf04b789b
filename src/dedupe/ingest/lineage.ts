import { createHash } from 'node:crypto';
import { RejectionCode } from '../../protocol/errors.js';
import { echo } from '../../protocol/text.js';
import type { Ancestor, EventLineage } from './event-lineage.js';
import type { IngestPlan, Placement } from './plan.js';

export type { Ancestor, EventLineage } from './event-lineage.js';

/** How many of its nearest ancestors an event keeps: the feedback check is exact within them. */
export const LINEAGE_KEPT = 32;


/** A stored event as a cause: itself and its own lineage. */
export interface CauseEvent {
  eventId: string;
  asset: string;
  partitionKey: string | null;
  depth: number;
  ancestors: readonly Ancestor[];
}

/** How deep a chain of consumers' emissions may go, and which assets may cycle. */
export interface LineagePolicy {
  /** The deepest an event may be (0 is a producer's own); at most LINEAGE_KEPT, so that the feedback check is exact. */
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

/** The digest an event is kept under in the lineage of the events below it. */
export function ancestorOf(asset: string, partitionKey: string | null): Ancestor {
  return createHash('sha256').update(JSON.stringify([asset, partitionKey])).digest('base64url').slice(0, 8);
}

/** The cursors of the causes that the plan's new events name. */
export function causesNeeded(plan: IngestPlan): number[] {
  const cursors = new Set<number>();
  for (const placement of plan.placements) {
    if (placement.type === 'event' && placement.item.cause) cursors.add(placement.item.cause.cursor);
  }
  return [...cursors];
}

/** The keys of the plan's new events that name a cause. */
export function causedEventKeys(plan: IngestPlan): string[] {
  return plan.placements.flatMap((placement) => (placement.type === 'event' && placement.item.cause ? [placement.item.key] : []));
}

/**
 * Places each new event in its lineage, and refuses, at the position it took:
 * - one whose cause is an event of an asset its token may not name as a cause (`forbidden`): a cause
 *   must be earned, so that nobody can graft a lineage onto a consumer's input;
 * - one that would repeat its own asset and partition within its kept lineage (a feedback loop);
 * - one deeper than its limit.
 * A refusal names only what the publisher sent and the cause it named, never the cause's own lineage. A
 * cause the store does not hold (compacted, or never there) starts a new lineage: the event is a root.
 * An event whose key is already recorded is not judged: it is answered as it was stored (a duplicate, or
 * a conflict), however the cause or the token has changed since.
 *
 * @param mayCite whether the request's token may name an event of this asset as a cause.
 * @param recorded the keys of the plan that the store already has a dedupe record of.
 * @param citesNothing whether the token may name no cause at all (it consumes nothing).
 */
export function placeInLineage(
  plan: IngestPlan,
  causes: ReadonlyMap<number, CauseEvent>,
  policy: LineagePolicy,
  mayCite: (asset: string) => boolean,
  recorded: ReadonlySet<string> = new Set(),
  citesNothing = false,
): IngestPlan {
  const placements = plan.placements.map((placement): Placement => {
    if (placement.type !== 'event' || !placement.item.cause) return placement;
    const { cursor } = placement.item.cause;
    const cause = causes.get(cursor);
    const { item } = placement;
    if (recorded.has(item.key)) return placement;
    const refuse = (code: RejectionCode, detail: string): Placement => ({
      type: 'refused',
      result: { status: 'rejected', seq: item.seq, key: item.key, code, detail, field: 'cause' },
    });
    // A token that consumes nothing is refused every cause alike, held or not: its answer tells nothing of
    // which cursors hold events.
    if (!cause ? citesNothing : !mayCite(cause.asset)) {
      return refuse(
        RejectionCode.Forbidden,
        `cause: event ${cursor} is not one this token may name as a cause; a cause must be an event of an asset the token consumes ` +
          '(oncebox token create --scope publish --producers … --consumes ASSET)',
      );
    }
    if (!cause) return placement;
    const { asset } = item.payload;
    const partitionKey = item.payload.partitionKey ?? null;
    const ancestors = [...cause.ancestors, ancestorOf(cause.asset, cause.partitionKey)].slice(-LINEAGE_KEPT);
    const depth = cause.depth + 1;
    const cycleLimit = policy.cycles.get(asset);
    if (cycleLimit === undefined && ancestors.includes(ancestorOf(asset, partitionKey))) {
      return refuse(
        RejectionCode.FeedbackLoop,
        `cause: this event (${describe(asset, partitionKey)}) would repeat an asset and partition of its own lineage above event ${cursor}; ` +
          `a consumer that emits what it consumes would trigger itself forever. Emit another asset or partition, or allow the cycle ` +
          `on the server (lineage.cycles: { "${echo(asset)}": <depth limit> })`,
      );
    }
    const limit = cycleLimit ?? policy.maxDepth;
    if (depth > limit) {
      return refuse(
        RejectionCode.LineageTooDeep,
        `cause: this event would be ${depth} emissions deep, more than the ${limit} this server allows for "${echo(asset)}"; raise ` +
          `lineage.maxDepth${cycleLimit === undefined ? '' : ` or lineage.cycles["${echo(asset)}"]`} if the chain is meant to be this long`,
      );
    }
    return { type: 'event', item, lineage: { causedBy: cause.eventId, depth, ancestors } };
  });
  return { ...plan, placements };
}

function describe(asset: string, partitionKey: string | null): string {
  return partitionKey === null ? `"${echo(asset)}"` : `"${echo(asset)}"/"${echo(partitionKey)}"`;
}
