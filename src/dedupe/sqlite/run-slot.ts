import { createHash } from 'node:crypto';
import type { StreamIdentity } from '../../protocol/wire.js';

/**
 * Where the embedded store files the keys of one run (migration 013): 32 bits of a hash of the producer,
 * run and task (four bytes in each index entry), never 0 (the slot of every other key). A stateless
 * hash, not a counter, so that a run's slot is the same after its stream state was compacted away; two
 * runs that share one only share pages.
 * @internal
 */
export function runSlot(stream: Pick<StreamIdentity, 'producer' | 'runId' | 'task'>): number {
  const digest = createHash('sha256').update(JSON.stringify([stream.producer, stream.runId, stream.task])).digest();
  return digest.readUInt32BE(0) || 1;
}
