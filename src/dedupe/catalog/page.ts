import type { Page } from '../../protocol/catalog.js';
import { encodePageCursor } from './page-cursor.js';

/**
 * The most bytes of items one catalog page answers (as JSON), whatever its `limit`: past it the page ends
 * early and `next` goes on from there. With each list's own cap on rows, what a reader can make the server
 * build, hold and send for one request is bounded.
 */
export const PAGE_BYTES = 1024 * 1024;

/**
 * The page of a list: the items of its first `limit` rows (the rows read are `limit + 1`, the last only to
 * tell whether more follow), cut short at `maxBytes` (PAGE_BYTES), with `next` the sort key of the last row shown.
 */
export function boundedPage<Row, Item>(
  rows: readonly Row[],
  limit: number,
  items: readonly Item[],
  keyOf: (row: Row) => readonly (string | number)[],
  maxBytes = PAGE_BYTES,
): Page<Item> {
  let bytes = 0;
  let shown = 0;
  for (const item of items) {
    // As UTF-8, as the answer is sent.
    bytes += Buffer.byteLength(JSON.stringify(item));
    // At least one item, however large: a page that holds nothing would never move on.
    if (shown > 0 && bytes > maxBytes) break;
    shown++;
  }
  const more = shown < items.length || rows.length > limit;
  return { items: items.slice(0, shown), next: more && shown > 0 ? encodePageCursor(keyOf(rows[shown - 1]!)) : null };
}
