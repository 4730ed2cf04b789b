import { createHash } from 'node:crypto';
import type { StreamIdentity } from '../protocol/wire.js';
import type { CheckedEvent, CheckedItem, InvalidItem } from './item-check.js';

/**
 * Where a store's key index (migration 013 on either store) holds a key inside the dedupe window. A key the
 * producer says is its run's alone (the oncebox-run-keys header: derived from the run and a partition key) is filed
 * under its run's slot and its partition key, so that a request's keys, from neighbouring partitions of
 * one run, share a few index pages instead of one random page each. Every other key is at
 * PRODUCER_PLACE, unique per producer.
 * @internal
 */
export interface KeyPlace {
  slot: number;
  partition: string;
}

/** @internal The place of every key not said to be the run's, and of every key stored before 013. */
export const PRODUCER_PLACE: KeyPlace = { slot: 0, partition: '' };

/**
 * The slot of a run: 32 bits of a hash of its producer, run and task (four bytes in each index entry),
 * never 0. A stateless hash, not a counter, so that a run's slot is the same after its stream state was
 * compacted away; two runs that share one only share pages.
 */
function runSlot(stream: Pick<StreamIdentity, 'producer' | 'runId' | 'task'>): number {
  const digest = createHash('sha256').update(JSON.stringify([stream.producer, stream.runId, stream.task])).digest();
  return digest.readUInt32BE(0) || 1;
}

/**
 * The places a request's keys may be at. A key can be at two: where a key of this run and partition is
 * filed, and PRODUCER_PLACE (a relay that did not list it, an older one, or a store from before
 * 013). A key said to be the run's is derived from its partition key, so it comes with the same one each
 * time; one that did not (a client misusing the header) is filed apart, an event per place.
 * @internal
 */
export class KeyPlaces {
  /** The slot of this request's run, where its keys of the run are filed. */
  readonly slot: number;
  /** Each key's partition, from the first item of the request that has it. */
  private readonly partitions = new Map<string, string>();

  constructor(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[]) {
    this.slot = runSlot(stream);
    for (const item of items) {
      if (item.kind === 'event' && !this.partitions.has(item.key)) this.partitions.set(item.key, item.payload.partitionKey ?? '');
    }
  }

  /** Where a key of this request's run and its partition is filed. */
  ofRun(key: string): KeyPlace {
    return { slot: this.slot, partition: this.partitions.get(key) ?? '' };
  }

  /** Both places a key of this request may be at, its run's first. */
  of(key: string): readonly KeyPlace[] {
    return [this.ofRun(key), PRODUCER_PLACE];
  }

  /** Where a new event's key goes, and the other place it must not already be at. */
  claim(item: CheckedEvent): { filedAt: KeyPlace; elsewhere: KeyPlace } {
    const run = this.ofRun(item.key);
    return item.keyOfRun ? { filedAt: run, elsewhere: PRODUCER_PLACE } : { filedAt: PRODUCER_PLACE, elsewhere: run };
  }
}

/** @internal What `look` finds at the first of `places` where it finds anything; the rest are not looked at. */
export function firstFound<T>(places: readonly KeyPlace[], look: (place: KeyPlace) => T | undefined): T | undefined {
  for (const place of places) {
    const found = look(place);
    if (found !== undefined) return found;
  }
  return undefined;
}
