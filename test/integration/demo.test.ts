import { describe, expect, it } from 'vitest';
import { runScript } from '../support/child.js';

describe('npm run demo', () => {
  it('survives a SIGKILL and a resume with every batch once, in order, and says so', async () => {
    const demo = await runScript('scripts/demo.ts', [], { timeoutMs: 90_000 });
    const lines = demo.lines.map((line) => (typeof line.text === 'string' ? line.text : JSON.stringify(line)));
    expect(demo.code, demo.stderr).toBe(0);
    expect(lines.filter((line) => /^batch-\d{4} {2}1 event {2}\(attempt [12]\)$/.test(line))).toHaveLength(50);
    expect(lines.at(-1)).toMatch(/^verdict: ok /);
    expect(lines.some((line) => /^attempt 1 {2}killed with SIGKILL after committing \d+ of 50 batches$/.test(line))).toBe(true);
  }, 120_000);
});
