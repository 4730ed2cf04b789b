import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeRunKeys, parseRunKeys } from '../../src/protocol/run-keys.js';

describe('the run-keys header', () => {
  it('says positions as ranges, and reads back the positions it said', () => {
    expect(encodeRunKeys([])).toBeUndefined();
    expect(encodeRunKeys([0, 1, 2, 3, 5, 7, 8])).toBe('0-3,5,7-8');
    expect(encodeRunKeys(Array.from({ length: 500 }, (_, i) => i))).toBe('0-499');
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 0, max: 999 }), { minLength: 1 }), (picked) => {
        const positions = [...picked].sort((a, b) => a - b);
        const read = parseRunKeys(encodeRunKeys(positions)!, 1000);
        expect(read).toEqual({ positions: new Set(positions) });
      }),
      { numRuns: 200, seed: 27 },
    );
  });

  it('refuses what is not a list of positions, and says why', () => {
    expect(parseRunKeys(' 0 - 1 ', 2)).toEqual({ problem: 'must be item positions and ranges, e.g. "0-499" or "0,2,5-9"' });
    expect(parseRunKeys('0, 1', 2)).toEqual({ positions: new Set([0, 1]) });
    for (const value of ['', 'a', '-1', '1-', '0,,1', '00001', '1e3']) {
      expect(parseRunKeys(value, 1000), value).toEqual({ problem: 'must be item positions and ranges, e.g. "0-499" or "0,2,5-9"' });
    }
    expect(parseRunKeys('0,'.repeat(5000), 10)).toEqual({ problem: 'must be at most 8192 characters' });
  });

  it('ignores positions that name no item of the batch: past its end, or in a range that goes backwards', () => {
    expect(parseRunKeys('3-1', 10)).toEqual({ positions: new Set() });
    expect(parseRunKeys('8-9999,20', 10)).toEqual({ positions: new Set([8, 9]) });
    // Wide ranges cost the batch's size, not theirs.
    expect(parseRunKeys(Array.from({ length: 800 }, () => '0-9999').join(','), 2)).toEqual({ positions: new Set([0, 1]) });
  });
});
