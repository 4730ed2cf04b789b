/**
 * Long campaigns of the generated tests, outside the default test run:
 *
 *   npm run test:model -- [--runs N] [--seed S]      the model-based property test
 *   npm run fuzz -- [--requests N] [--seed S]        the hostile-input campaign against both stores
 *
 * The seed is printed either way; pass it back with --seed to replay a failure.
 */
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';

const CAMPAIGNS = {
  model: { file: 'test/property/outbox-model.test.ts', count: 'runs', env: 'ONCEBOX_RUNS', default: '1000' },
  fuzz: { file: 'test/property/hostile-campaign.test.ts', count: 'requests', env: 'ONCEBOX_FUZZ_REQUESTS', default: '20000' },
} as const;

const [name, ...args] = process.argv.slice(2);
const campaign = CAMPAIGNS[name as keyof typeof CAMPAIGNS];
if (!campaign) {
  console.error(`campaign: give one of ${Object.keys(CAMPAIGNS).join(', ')}`);
  process.exit(2);
}
const { values } = parseArgs({
  args,
  options: { [campaign.count]: { type: 'string', default: campaign.default }, seed: { type: 'string' } },
  strict: true,
});
for (const [flag, value] of Object.entries(values)) {
  if (typeof value === 'string' && !/^\d+$/.test(value)) {
    console.error(`${name}: --${flag} must be a whole number (got "${value}")`);
    process.exit(2);
  }
}

const result = spawnSync('npx', ['vitest', 'run', campaign.file, '--reporter', 'default'], {
  stdio: 'inherit',
  env: { ...process.env, [campaign.env]: values[campaign.count] as string, ...(values.seed === undefined ? {} : { ONCEBOX_SEED: values.seed as string }) },
});
process.exit(result.status ?? 1);
