// npm run mutation: StrykerJS mutation testing of the mechanism files (not part of npm test: it runs the
// tests once per mutant). Narrow a run with `npm run mutation -- --mutate src/outbox/commit/keys.ts`. Scores per
// file, and why each survivor is harmless, are recorded in docs/guarantees.md.
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts', related: false },
  mutate: [
    'src/dedupe/ingest/plan.ts',
    'src/dedupe/ingest/resolve.ts',
    'src/dedupe/ingest/steps.ts',
    'src/dedupe/item-check.ts',
    'src/dedupe/sqlite/store.ts',
    'src/dedupe/postgres/store.ts',
    'src/dedupe/tokens.ts',
    'src/dedupe/auth.ts',
    'src/outbox/commit/commit.ts',
    'src/outbox/commit/row-writer.ts',
    'src/outbox/commit/keys.ts',
    'src/outbox/relay/answers.ts',
    'src/outbox/relay/lease.ts',
    'src/outbox/file/run-attempts.ts',
    'src/outbox/commit/sync-callback.ts',
    'src/dedupe/ingest/lineage.ts',
    'src/consumer/consumer.ts',
    'src/consumer/consume-transaction.ts',
    'src/consumer/triggers.ts',
    'src/consumer/notifiers.ts',
    'src/outbox/commit/held-mirror.ts',
    'src/client/failure-streak.ts',
    'src/airflow/event-body.ts',
    'src/airflow/asset-map.ts',
  ],
  coverageAnalysis: 'perTest',
  concurrency: 2,
  timeoutMS: 20_000,
  // The first run executes every included test once, to learn which tests cover which mutant.
  dryRunTimeoutMinutes: 30,
  // Reuses the results of mutants whose code and tests did not change since the last run.
  incremental: true,
  incrementalFile: 'reports/stryker-incremental.json',
  reporters: ['clear-text', 'progress', 'json', 'html'],
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  htmlReporter: { fileName: 'reports/mutation/mutation.html' },
  thresholds: { high: 90, low: 85, break: null },
  ignoreStatic: true,
  tempDirName: '.stryker-tmp',
  // Airflow's and schemathesis' virtual environments are not the project's, and their symlinks do not copy.
  ignorePatterns: ['.airflow', '.schemathesis'],
};
