import { expect } from 'vitest';
import { checkHistory, describeAnomalies, type Publication, type RunHistory } from '../../src/testing/index.js';
import type { StoredEvent } from '../../src/protocol/wire.js';
import type { RunningServer } from './server.js';

/** batch-0001, batch-0002, …: the partition keys examples/batch-ingest.ts emits. */
export const batchPartition = (batch: number, prefix = '') => `${prefix}batch-${String(batch).padStart(4, '0')}`;

const history = (events: Publication[]): RunHistory => ({ events, checkpoints: undefined, data: new Map(), refused: [] });
const asPublication = ({ asset, partitionKey, partitionDate, extra }: StoredEvent): Publication => ({ asset, partitionKey, partitionDate, extra });

/**
 * The server holds each of `count` batches of batch-ingest.ts exactly once, in batch order, and nothing
 * else of `asset`: the testing kit's history checker, held to a clean run that is the list of batches.
 */
export async function expectEachBatchOnceInOrder(server: RunningServer, count: number, asset = 'batch_ready'): Promise<StoredEvent[]> {
  const events = await server.events({ asset });
  const clean = Array.from({ length: count }, (_, i): Publication => ({ asset, partitionKey: batchPartition(i + 1), partitionDate: null, extra: null }));
  const anomalies = checkHistory(history(clean), history(events.map(asPublication)), { payloads: false });
  expect(describeAnomalies(anomalies)).toEqual([]);
  return events;
}
