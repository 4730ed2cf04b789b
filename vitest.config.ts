import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The testing kit's examples are tests too: a user's property test of their own job, as docs/testing.md shows it.
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Crash and network tests start real processes and servers; two workers match the two cores.
    pool: 'forks',
    maxWorkers: 2,
    // Safety nets, not speed limits: on a busy 2-core machine a test of real processes may take minutes.
    testTimeout: 180_000,
    // The producer's warnings (a server down on purpose, a zombie fenced on purpose) would drown the
    // report; the tests of those logs set the level they read.
    env: { ONCEBOX_LOG_LEVEL: 'silent' },
    hookTimeout: 180_000,
    // The JSON report is what .ci/run counts; the default reporter is for people.
    reporters: ['default', ['json', { outputFile: '.vitest-report.json' }]],
  },
});
