import type { EventPage, ItemResult, StreamIdentity } from '../protocol/wire.js';
import type { CheckedItem, InvalidItem } from './item-check.js';

export interface EventQuery {
  asset?: string | undefined;
  /** Return events with a cursor greater than this. */
  after: number;
  limit: number;
}

/**
 * Where the server keeps assets, dedupe records, events and stream state. Each backend runs the whole
 * of `ingest` in one transaction: either every result it returns is durable, or none is.
 */
export interface DedupeStore {
  ingest(stream: StreamIdentity, items: readonly (CheckedItem | InvalidItem)[]): Promise<ItemResult[]>;
  listEvents(query: EventQuery): Promise<EventPage>;
  registerAsset(name: string): Promise<{ created: boolean }>;
  listAssets(): Promise<string[]>;
  close(): Promise<void>;
}
