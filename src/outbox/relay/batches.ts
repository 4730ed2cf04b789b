import type { OutboxRow } from '../file/schema.js';

/** What a row costs in a request besides its `extra`, for the byte limit: its key, ids and JSON. */
const ROW_OVERHEAD_BYTES = 256;

/**
 * Whether two consecutive rows of one stream came from one commit. A commit stamps all its rows with
 * one `committed_at`, so rows with different stamps are from different commits; two commits in the same
 * millisecond read as one, which only keeps them together.
 */
function sameCommit(a: OutboxRow, b: OutboxRow): boolean {
  return a.committed_at === b.committed_at;
}

/**
 * The next pending rows in commit order, all of one stream (the first row's), cut into at most `count`
 * consecutive batches within the row and byte limits. Rows of the next stream wait for this stream's
 * window: the order between streams is commit order, and only the server's gap check orders a stream's
 * requests.
 *
 * A batch ends between commits, never inside one that fits in a batch: the server stores each request
 * whole, so whatever part of a window reaches it before the producer's machine is lost, it holds whole
 * commits, and a retry on a fresh machine resumes from a checkpoint that matches the events stored (a
 * terminal commit's lifecycle event never arrives without the checkpoint that says the run ended). Only a
 * commit larger than a batch is cut inside. `more` says `rows` stop at a fetch limit: their last commit
 * may go on, so it waits for the next window unless it is all there is.
 * @internal
 */
export function cutBatches(rows: readonly OutboxRow[], limits: { maxRows: number; maxBytes: number; count: number; more?: boolean }): OutboxRow[][] {
  const first = rows[0];
  const batches: OutboxRow[][] = [];
  let batch: OutboxRow[] = [];
  let bytes = 0;
  let ended = false;
  for (const row of rows) {
    if (row.run_id !== first!.run_id || row.task !== first!.task || row.attempt !== first!.attempt) {
      ended = true;
      break;
    }
    const size = rowBytes(row);
    if (batch.length === limits.maxRows || (batch.length > 0 && bytes + size > limits.maxBytes)) {
      // The rows of the commit this row continues move on to the next batch, unless they fill this one.
      const carried = sameCommit(batch.at(-1)!, row) ? batch.splice(commitStart(batch)) : [];
      if (batch.length === 0) batch = carried.splice(0);
      batches.push(batch);
      if (batches.length === limits.count) return batches;
      batch = carried;
      bytes = batch.reduce((sum, carriedRow) => sum + rowBytes(carriedRow), 0);
    }
    batch.push(row);
    bytes += size;
  }
  if (batch.length > 0 && limits.more === true && !ended) {
    // The fetch may have stopped inside the last commit: it goes out whole with the next window.
    const start = commitStart(batch);
    if (start > 0) batch.splice(start);
    else if (batches.length > 0) batch = [];
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}

function rowBytes(row: OutboxRow): number {
  return ROW_OVERHEAD_BYTES + (row.extra?.length ?? 0);
}

/** Where the last commit of `batch` starts. */
function commitStart(batch: readonly OutboxRow[]): number {
  let start = batch.length - 1;
  while (start > 0 && sameCommit(batch[start - 1]!, batch[start]!)) start--;
  return start;
}
