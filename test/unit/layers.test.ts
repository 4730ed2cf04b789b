import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../support/child.js';

/**
 * The layers of src and no import cycle, type-only ones included, as .dependency-cruiser.cjs states
 * them (docs/README.md, "Where the code is"): dependency-cruiser over the whole of src and the web console's sources, every rule an
 * error, so that a new cycle or a layer crossed fails `npm test`.
 */
describe('the layers of src', () => {
  it('have no import cycle and no import across a layer', () => {
    const cli = join(REPO, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs');
    const run = spawnSync(process.execPath, [cli, 'src', 'console/src', '--config', '.dependency-cruiser.cjs', '--output-type', 'json'], { cwd: REPO, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    expect(run.error).toBeUndefined();
    const report = JSON.parse(run.stdout) as {
      summary: { violations: { rule: { name: string }; from: string; to: string; cycle?: { name: string }[] }[]; totalCruised: number };
    };
    // It read the code: a resolution problem would cruise nothing and find nothing.
    expect(report.summary.totalCruised).toBeGreaterThan(100);
    const violations = report.summary.violations.map((v) => `${v.rule.name}: ${v.from} → ${v.cycle ? v.cycle.map((step) => step.name).join(' → ') : v.to}`);
    expect(violations).toEqual([]);
  });
});
