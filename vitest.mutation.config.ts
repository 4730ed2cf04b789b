import { defineConfig } from 'vitest/config';

/**
 * The test run StrykerJS uses to judge each mutant (`npm run mutation`). Only tests that run the code in
 * their own process can kill a mutant: a child process (the crash tests, the CLI, the demo, the PostgreSQL
 * cluster of `oncebox server` processes) runs without the active mutant, so those files are left out.
 * The model test runs fewer cases here: it covers nearly every mutant, and runs once per mutant.
 */
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts', 'test/store/**/*.test.ts', 'test/property/**/*.test.ts', 'test/integration/**/*.test.ts', 'test/fault/network.test.ts', 'test/fault/consumer-zombie.test.ts'],
    // Also left out: breaks.test.ts reads the source, which Stryker rewrites into its instrumented form.
    exclude: [
      'test/integration/cli.test.ts',
      'test/integration/demo.test.ts',
      'test/integration/exports.test.ts',
      'test/integration/quickstart.test.ts',
      'test/unit/breaks.test.ts',
      // These build, pack or document the source, which Stryker has rewritten into its instrumented form.
      'test/integration/package.test.ts',
      'test/integration/api-docs.test.ts',
      'test/integration/openapi.test.ts',
      // These read the source as text (its imports, sizes and docs), which Stryker has instrumented.
      'test/unit/layers.test.ts',
      'test/unit/code-size.test.ts',
      'test/unit/options-documented.test.ts',
      // schemathesis runs in a child process against a server of its own: no mutant is active there.
      'test/property/schema-fuzz.test.ts',
    ],
    env: { ONCEBOX_RUNS: '15', ONCEBOX_SEED: '20261130', ONCEBOX_LOG_LEVEL: 'silent' },
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
