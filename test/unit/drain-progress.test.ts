import { describe, expect, it } from 'vitest';
import { DrainProgress } from '../../src/cli/drain-progress.js';

function output(isTTY: boolean) {
  const written: string[] = [];
  return { out: { isTTY, write: (text: string) => written.push(text) }, written };
}

describe('drain progress', () => {
  it('on a terminal, redraws one line with a bar, pending, rate and time left', () => {
    let now = 0;
    const { out, written } = output(true);
    const progress = new DrainProgress(out, { pending: 100, delivered: 50, dead: 0 }, () => now);
    now = 1000;
    progress.update({ pending: 60, delivered: 90, dead: 0 });
    now = 1050; // too soon to redraw
    progress.update({ pending: 59, delivered: 91, dead: 0 });
    now = 2000;
    progress.update({ pending: 20, delivered: 130, dead: 0 });
    progress.finish({ pending: 0, delivered: 150, dead: 1 }, 'drained');
    expect(written).toEqual([
      '\r[##########--------------] 40/100 events · 60 pending · 40/s · 2 s left\u001b[K',
      '\r[###################-----] 80/100 events · 20 pending · 40/s · 1 s left\u001b[K',
      '\r[########################] 100/100 events · 0 pending · 50/s · 0 s left\u001b[K\n',
      'oncebox relay: drained: 100 events delivered, 0 pending, 1 dead\n',
    ]);
  });

  it('elsewhere, prints a plain line each second, and the last word', () => {
    let now = 0;
    const { out, written } = output(false);
    const progress = new DrainProgress(out, { pending: 10, delivered: 0, dead: 0 }, () => now);
    now = 500;
    progress.update({ pending: 8, delivered: 2, dead: 0 });
    now = 1500;
    progress.update({ pending: 7, delivered: 3, dead: 0 });
    now = 2000;
    progress.update({ pending: 6, delivered: 4, dead: 0 });
    progress.finish({ pending: 6, delivered: 4, dead: 0 }, 'interrupted');
    // Not before a second has passed since the start, nor since the last line.
    expect(written).toEqual([
      'oncebox relay: 3 events delivered, 7 pending, 0 dead, 2 events/s, time left 4 s\n',
      'oncebox relay: interrupted: 4 events delivered, 6 pending, 0 dead\n',
    ]);
  });

  it('says the time left is unknown while nothing moves', () => {
    let now = 0;
    const { out, written } = output(false);
    const progress = new DrainProgress(out, { pending: 5, delivered: 0, dead: 0 }, () => now);
    now = 1000;
    progress.update({ pending: 5, delivered: 0, dead: 0, checkpoints: 2 });
    expect(written).toEqual(['oncebox relay: 0 events delivered, 5 pending, 0 dead, 0 events/s, time left unknown; 2 checkpoint updates pending\n']);
  });
});
