// npm run mutation:ingest: StrykerJS over the files of issue 27's storage and request path (PostgreSQL's group
// commit and steps, where a key is filed, the relay's batches, resuming from the server, the run-keys header),
// judged by the tests that drive them in their own process (vitest.mutation.ingest.config.ts): a few minutes
// per file rather than the whole suite's hour. Scores and survivors are in docs/guarantees.md.
import base from './stryker.config.mjs';

export default {
  ...base,
  vitest: { configFile: 'vitest.mutation.ingest.config.ts', related: false },
  mutate: [
    'src/dedupe/postgres/ingest-groups.ts',
    'src/dedupe/postgres/ingest-steps.ts',
    'src/outbox/relay/batches.ts',
    'src/outbox/resume.ts',
    'src/dedupe/key-places.ts',
    'src/protocol/run-keys.ts',
  ],
  incrementalFile: 'reports/stryker-ingest-incremental.json',
  jsonReporter: { fileName: 'reports/mutation-ingest/mutation.json' },
  htmlReporter: { fileName: 'reports/mutation-ingest/mutation.html' },
  tempDirName: '.stryker-tmp-ingest',
};
