import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { defineConfig } from 'vitest/config';

/**
 * The files that take minutes, longest first. A clean checkout has no timings of an earlier run, and
 * vitest then starts the largest files first, which puts these small files last: the run ended with
 * the simulation alone on one core. Started first, they run beside everything else.
 */
const LONGEST_FIRST = [
  'test/sim/simulation.test.ts',
  'test/property/schema-fuzz.test.ts',
  'examples/testing/ingest-job.test.ts',
  'examples/testing/consumer-job.test.ts',
  'test/testing/wrong-jobs.test.ts',
  'test/integration/package.test.ts',
  'test/store/catalog-bounds.test.ts',
  'test/integration/bullmq.test.ts',
];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (file: TestSpecification) => {
      const at = LONGEST_FIRST.findIndex((long) => file.moduleId.endsWith(`/${long}`));
      return at < 0 ? LONGEST_FIRST.length : at;
    };
    return sorted.map((file, index) => ({ file, index })).sort((a, b) => rank(a.file) - rank(b.file) || a.index - b.index).map(({ file }) => file);
  }
}

export default defineConfig({
  test: {
    // The testing kit's examples are tests too: a user's property test of their own job, as docs/testing.md shows it.
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Crash and network tests start real processes and servers, and spend much of their time waiting on
    // them: with two workers on the two cores a third of the CPU stood idle (a clean run took 1949 s; with
    // three, 1650 s).
    pool: 'forks',
    maxWorkers: 3,
    sequence: { sequencer: LongestFirst },
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
