import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO, runScript } from '../support/child.js';
import { pgAvailable } from '../support/postgres.js';

const installed = existsSync(join(REPO, '.schemathesis/venv/bin/schemathesis'));
if (!installed && process.env.CI === 'true') {
  throw new Error('schemathesis is required under CI=true, but .schemathesis/venv has none: run bash fuzz/install.sh (.ci/run does)');
}
if (!installed) console.warn('schema fuzzing skipped: schemathesis is not installed; run bash fuzz/install.sh');

/**
 * The server against its own OpenAPI document, as a kept habit: schemathesis with every check, both
 * stores, an admin, a publish and a read token (scripts/fuzz-schema.ts). A short, bounded campaign with
 * a fixed seed here; `npm run fuzz:schema -- --examples 500` for a long one.
 */
describe.skipIf(!installed)('schema-driven fuzzing', () => {
  it('finds the server equal to its OpenAPI document: no failure on either store with any token (seed 2026)', { timeout: 420_000 }, async () => {
    const stores = pgAvailable ? 'sqlite,postgres' : 'sqlite';
    const run = await runScript('scripts/fuzz-schema.ts', ['--examples', '8', '--max-time', '10', '--seed', '2026', '--stores', stores], { timeoutMs: 400_000 });
    const verdicts = run.lines.map((line) => String(line.text ?? '')).filter((text) => text.startsWith('fuzz:schema: ') && text.includes(' token: '));
    expect(verdicts).toHaveLength(stores.split(',').length * 3);
    expect(verdicts.filter((text) => !text.endsWith('no failures')), run.lines.map((line) => line.text).join('\n').slice(-6000)).toEqual([]);
    expect(run.code).toBe(0);
  });
});
