import fc from 'fast-check';

/**
 * A test's random choices, drawn up front from one seed with fast-check, so that a failing run can be
 * replayed: the seed is printed, and ONCEBOX_SEED=<seed> draws the same plan again.
 */
export function seededPlan<T>(name: string, arbitrary: fc.Arbitrary<T>): { seed: number; plan: T } {
  const seed = Number(process.env.ONCEBOX_SEED ?? Date.now() % 2 ** 31);
  console.log(`${name}: seed ${seed} (ONCEBOX_SEED=${seed} to replay)`);
  const [plan] = fc.sample(arbitrary, { seed, numRuns: 1 });
  return { seed, plan: plan! };
}
