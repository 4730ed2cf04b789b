// npm run mutation:producer: the producer's mechanism files, judged by the producer's tests only
// (vitest.mutation.producer.config.ts says why). Narrow it further with --mutate.
import base from './stryker.config.mjs';

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  ...base,
  vitest: { ...base.vitest, configFile: 'vitest.mutation.producer.config.ts' },
  mutate: [
    'src/outbox/commit/commit.ts',
    'src/outbox/commit/row-writer.ts',
    'src/outbox/commit/keys.ts',
    'src/outbox/commit/held-mirror.ts',
    'src/outbox/commit/sync-callback.ts',
    'src/outbox/relay/answers.ts',
    'src/outbox/relay/lease.ts',
    'src/outbox/file/run-attempts.ts',
  ],
  incrementalFile: 'reports/stryker-producer-incremental.json',
  jsonReporter: { fileName: 'reports/mutation/producer.json' },
  htmlReporter: { fileName: 'reports/mutation/producer.html' },
};
