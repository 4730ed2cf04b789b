import { defineConfig } from 'vitest/config';
import base from './vitest.mutation.config.js';

/**
 * A narrower test run for mutating the producer's files alone (`npm run mutation:producer`): the tests
 * that drive the outbox, its commit, relay, lease and run attempts in their own process. With every test
 * of vitest.mutation.config.ts each producer mutant takes half a minute here (nearly every test opens an
 * outbox); these judge it in a few seconds. Fewer tests can only catch fewer mutants, so a score measured
 * here is a floor of the full run's.
 */
// Spread, not mergeConfig: vitest's merge would append this include list to the base's.
export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: [
      'test/unit/{commit,lease,run-attempts,keys,answers,checkpoint,emission-validation,batch-encoding,sync-callback}.test.ts',
      'test/property/outbox-model.test.ts',
      'test/integration/{delivery,conflicts,dead-letters,same-file-retry,shared-file-tasks,multi-task,resume,held-release,terminal-paths,lifecycle,tracing,consumer}.test.ts',
      'test/fault/network.test.ts',
    ],
  },
});
