import { defineConfig } from 'vitest/config';
import base from './vitest.mutation.config.js';

/**
 * The tests that judge the mutants of `npm run mutation:ingest` (stryker.ingest.config.mjs): the unit
 * tests of the batches, the header and the ingest plan, both stores' suites, and the integration tests
 * that resume, deliver and file keys. Fewer tests can only catch fewer mutants: a floor of the full run's.
 */
// Spread, not mergeConfig: vitest's merge would append this include list to the base's.
export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: [
      'test/unit/{batches,batch-encoding,run-keys,ingest}.test.ts',
      'test/store/**/*.test.ts',
      'test/integration/{resume,delivery,key-scope,same-file-retry,terminal-paths,held-release}.test.ts',
    ],
  },
});
