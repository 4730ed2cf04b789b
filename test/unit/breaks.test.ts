import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BREAKS, breaksTable, TABLE_END, TABLE_START } from '../../scripts/breaks.js';
import { REPO } from '../support/child.js';

/**
 * The deliberate bugs of scripts/breaks.ts are run by `npm run breaks` (minutes). What can be checked
 * at once is checked here: every edit still applies to the code as it is, every named test file exists,
 * and docs/guarantees.md shows this very list.
 */
describe('the table of deliberate bugs', () => {
  it.each(BREAKS.map((b) => [b.what, b] as const))('still applies: %s', (_what, b) => {
    for (const edit of b.edits) {
      const text = readFileSync(`${REPO}/${edit.file}`, 'utf8');
      expect(text.split(edit.find).length - 1, `${edit.file}: ${edit.find}`).toBe(1);
    }
    for (const test of b.caughtBy) expect(() => readFileSync(`${REPO}/${test.file}`)).not.toThrow();
  });

  it('is the one in docs/guarantees.md', () => {
    const docs = readFileSync(`${REPO}/docs/guarantees.md`, 'utf8');
    const section = docs.slice(docs.indexOf(TABLE_START) + TABLE_START.length, docs.indexOf(TABLE_END)).trim();
    expect(section).toBe(breaksTable());
  });
});
