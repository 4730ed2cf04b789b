import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runScript } from '../support/child.js';

describe('npm run demo', () => {
  it('survives a SIGKILL, a lost outbox file and zombies on another machine and on the same file, with every batch once, in order', async () => {
    const demo = await runScript('scripts/demo.ts', ['--keep'], { timeoutMs: 360_000 });
    const lines = demo.lines.map((line) => (typeof line.text === 'string' ? line.text : JSON.stringify(line)));
    expect(demo.code, demo.stderr).toBe(0);
    for (const run of ['crash', 'fresh', 'zombie', 'zombie-same']) {
      expect(lines.filter((line) => new RegExp(`^${run}/batch-\\d{4} {2}1 event {2}\\(attempt [12]\\)$`).test(line))).toHaveLength(50);
    }
    expect(lines.filter((line) => line === '  attempt 1  stopped with FencedError (fenced by attempt 2)')).toHaveLength(2);
    expect(lines.some((line) => /^ {2}attempt 2 {2}resumed after batch \d+ from the server's checkpoint copy and exited 0$/.test(line))).toBe(true);
    expect(lines.at(-1)).toMatch(/^verdict: ok /);
    // Asked to, it keeps its files to look at after.
    const kept = /^kept: (\S+) /.exec(lines.at(-2) ?? '')?.[1];
    expect(kept, lines.at(-2)).toBeDefined();
    expect(existsSync(join(kept!, 'server.db'))).toBe(true);
    rmSync(kept!, { recursive: true, force: true });
  }, 400_000);
});
