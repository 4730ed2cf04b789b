import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { OutboxRow } from '../../src/outbox/file/schema.js';
import { cutBatches } from '../../src/outbox/relay/batches.js';

/** Rows of one stream, `sizes[i]` rows for commit i (its committed_at), numbered in commit order. */
function commits(sizes: readonly number[], extraBytes = 0): OutboxRow[] {
  let id = 0;
  return sizes.flatMap((size, commit) =>
    Array.from({ length: size }, () => {
      id++;
      return { id, seq: id, run_id: 'r', task: 't', attempt: 1, committed_at: 1000 + commit, extra: extraBytes > 0 ? 'x'.repeat(extraBytes) : null } as OutboxRow;
    }),
  );
}

const shape = (batches: OutboxRow[][]) => batches.map((batch) => batch.map((row) => `${row.committed_at - 1000}`).join(''));

describe("the relay's batches", () => {
  it('end between commits: a commit that fits in a batch goes out whole, in the next batch if it must', () => {
    // Commits of 2, 2 and 3 rows, batches of 5: the third commit would straddle the first cut.
    expect(shape(cutBatches(commits([2, 2, 3]), { maxRows: 5, maxBytes: 1e9, count: 4 }))).toEqual(['0011', '222']);
    // By bytes too: each row here costs 256 + 100 bytes.
    expect(shape(cutBatches(commits([2, 2, 3], 100), { maxRows: 100, maxBytes: 5 * 356, count: 4 }))).toEqual(['0011', '222']);
    // A commit larger than a batch is cut inside, and the next commit starts a batch of its own.
    expect(shape(cutBatches(commits([1, 7, 1]), { maxRows: 3, maxBytes: 1e9, count: 5 }))).toEqual(['0', '111', '111', '12']);
    // At most `count` batches.
    expect(shape(cutBatches(commits([2, 2, 2, 2]), { maxRows: 3, maxBytes: 1e9, count: 2 }))).toEqual(['00', '11']);
  });

  it('hold the rows of one stream only, and count every byte of a row against the limit', () => {
    // The fetch is in commit order across streams: another attempt's rows end the window, and the first
    // stream's last commit goes out (it is whole: the next stream's rows follow it).
    const rows = [...commits([2, 2]), ...commits([1]).map((row) => ({ ...row, id: 99, attempt: 2 }))];
    const batches = cutBatches(rows, { maxRows: 10, maxBytes: 1e9, count: 4, more: true });
    expect(batches.map((batch) => batch.map((row) => `${row.attempt}:${row.committed_at - 1000}`))).toEqual([['1:0', '1:0', '1:1', '1:1']]);
    expect(cutBatches([...commits([1]), { ...commits([1])[0]!, task: 'other' }], { maxRows: 10, maxBytes: 1e9, count: 4 }).flat()).toHaveLength(1);
    expect(cutBatches([...commits([1]), { ...commits([1])[0]!, run_id: 'other' }], { maxRows: 10, maxBytes: 1e9, count: 4 }).flat()).toHaveLength(1);
    // Each row here costs 256 + 100 bytes: three fit exactly, a fourth does not.
    expect(shape(cutBatches(commits([1, 1, 1, 1], 100), { maxRows: 100, maxBytes: 3 * 356, count: 4 }))).toEqual(['012', '3']);
    // A row larger than the byte limit goes alone, never after an empty request.
    expect(shape(cutBatches(commits([1, 1], 1000), { maxRows: 100, maxBytes: 500, count: 4 }))).toEqual(['0', '1']);
    // Rows carried over with their commit still count against the next batch's bytes.
    expect(shape(cutBatches(commits([1, 2, 1], 100), { maxRows: 3, maxBytes: 2 * 356, count: 4 }))).toEqual(['0', '11', '2']);
  });

  it('leave a last commit the fetch may have cut for the next window, unless nothing else goes', () => {
    expect(shape(cutBatches(commits([2, 3]), { maxRows: 5, maxBytes: 1e9, count: 1, more: true }))).toEqual(['00']);
    expect(shape(cutBatches(commits([2, 3]), { maxRows: 3, maxBytes: 1e9, count: 2, more: true }))).toEqual(['00']);
    // A commit larger than a window goes out a window at a time.
    expect(shape(cutBatches(commits([5]), { maxRows: 3, maxBytes: 1e9, count: 2, more: true }))).toEqual(['000']);
    expect(shape(cutBatches(commits([5]), { maxRows: 3, maxBytes: 1e9, count: 1, more: true }))).toEqual(['000']);
    expect(shape(cutBatches(commits([2, 3]), { maxRows: 5, maxBytes: 1e9, count: 1 }))).toEqual(['00111']);
  });

  it('keep every row once, in order, within the limits, and cut inside a commit only when it is larger than a batch (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 30 }),
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1, max: 6 }),
        fc.boolean(),
        (sizes, maxRows, count, more) => {
          const rows = commits(sizes);
          const batches = cutBatches(rows, { maxRows, maxBytes: 1e9, count, more });
          const sent = batches.flat();
          expect(batches.length).toBeLessThanOrEqual(count);
          expect(batches.length).toBeGreaterThan(0);
          expect(sent.map((row) => row.id)).toEqual(rows.slice(0, sent.length).map((row) => row.id));
          for (const batch of batches) {
            expect(batch.length).toBeGreaterThan(0);
            expect(batch.length).toBeLessThanOrEqual(maxRows);
          }
          // Each cut between batches, and the end of what is sent, falls between commits, unless the
          // commit there is larger than a batch.
          const cuts = batches.map((_, i) => batches.slice(0, i + 1).flat().length);
          for (const cut of cuts) {
            const before = rows[cut - 1]!;
            const after = rows[cut];
            const size = sizes[before.committed_at - 1000]!;
            if (after !== undefined && after.committed_at === before.committed_at) expect(size, `cut at row ${cut} of ${JSON.stringify(sizes)}`).toBeGreaterThan(maxRows);
          }
        },
      ),
      { seed: 20261202, numRuns: 500 },
    );
  });
});
