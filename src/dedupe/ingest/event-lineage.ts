/**
 * One event in a lineage, as the server keeps it: a 48-bit digest of its asset and partition key, in
 * 8 base64url characters. A digest, not the names, so that what an event keeps of its lineage is small
 * and tells a reader nothing of other producers' assets and partitions; 48 bits, so that two of the few
 * ancestors one event keeps collide with odds below one in 10^12.
 */
export type Ancestor = string;

/** What the store keeps of an event's lineage: what caused it, how deep it is, and its nearest ancestors. */
export interface EventLineage {
  /** The id of the event it responds to; null for a producer's own event. */
  causedBy: string | null;
  depth: number;
  /** The nearest 32 (LINEAGE_KEPT) events above it, farthest first; empty for a producer's own event. */
  ancestors: readonly Ancestor[];
}
