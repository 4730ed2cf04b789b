/**
 * npm run test:model -- [--runs N] [--seed S]: a long campaign of the model-based property test
 * (test/property/outbox-model.test.ts), outside the default test run. The seed is printed either way;
 * pass it back with --seed to replay a failure.
 */
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '1000' },
    seed: { type: 'string' },
  },
  strict: true,
});
for (const [name, value] of Object.entries(values)) {
  if (value !== undefined && !/^\d+$/.test(value)) {
    console.error(`test:model: --${name} must be a whole number (got "${value}")`);
    process.exit(2);
  }
}

const result = spawnSync('npx', ['vitest', 'run', 'test/property/outbox-model.test.ts', '--reporter', 'default'], {
  stdio: 'inherit',
  env: { ...process.env, ONCEBOX_RUNS: values.runs, ...(values.seed === undefined ? {} : { ONCEBOX_SEED: values.seed }) },
});
process.exit(result.status ?? 1);
