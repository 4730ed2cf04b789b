import type { OutboxRow } from '../file/schema.js';

/** What a row costs in a request besides its `extra`, for the byte limit: its key, ids and JSON. */
const ROW_OVERHEAD_BYTES = 256;

/**
 * The next pending rows in commit order, all of one stream (the first row's), cut into at most `count`
 * consecutive batches within the row and byte limits. Rows of the next stream wait for this stream's
 * window: the order between streams is commit order, and only the server's gap check orders a stream's
 * requests.
 * @internal
 */
export function cutBatches(rows: readonly OutboxRow[], limits: { maxRows: number; maxBytes: number; count: number }): OutboxRow[][] {
  const first = rows[0];
  const batches: OutboxRow[][] = [];
  let batch: OutboxRow[] = [];
  let bytes = 0;
  for (const row of rows) {
    if (row.run_id !== first!.run_id || row.task !== first!.task || row.attempt !== first!.attempt) break;
    const size = ROW_OVERHEAD_BYTES + (row.extra?.length ?? 0);
    if (batch.length === limits.maxRows || (batch.length > 0 && bytes + size > limits.maxBytes)) {
      batches.push(batch);
      if (batches.length === limits.count) return batches;
      batch = [];
      bytes = 0;
    }
    batch.push(row);
    bytes += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}
