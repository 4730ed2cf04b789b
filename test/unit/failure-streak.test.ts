import { describe, expect, it } from 'vitest';
import { FailureStreak } from '../../src/client/failure-streak.js';

function recordingLogger() {
  const lines: [string, Record<string, unknown>, string][] = [];
  const at = (level: string) => (fields: Record<string, unknown>, message: string) => void lines.push([level, fields, message]);
  return { lines, logger: { info: at('info'), warn: at('warn'), error: at('error') } };
}

describe('a failure streak', () => {
  it('logs each cause once, not each retry, keeps it for status, and logs the recovery once', () => {
    const { lines, logger } = recordingLogger();
    const streak = new FailureStreak(logger, { group: 'g' });
    expect(streak.lastError).toBeNull();
    streak.recovered('back', 'back again');
    expect(lines).toEqual([]);
    streak.failed('down', 'server down');
    streak.failed('down', 'server down');
    expect(streak.lastError).toBe('server down');
    streak.failed('down', 'server refused');
    expect(lines).toEqual([
      ['warn', { code: 'down', group: 'g' }, 'server down'],
      ['warn', { code: 'down', group: 'g' }, 'server refused'],
    ]);
    streak.recovered('back', 'back again');
    streak.recovered('back', 'back again');
    expect(streak.lastError).toBeNull();
    expect(lines.slice(2)).toEqual([['info', { code: 'back', group: 'g' }, 'back again']]);
    // A cause seen before the recovery is a new streak after it: logged again.
    streak.failed('down', 'server down');
    expect(lines).toHaveLength(4);
  });
});
