import pg from 'pg';
import { afterAll } from 'vitest';
import { postgresMissing } from '../../bench/support.js';

export const PG_URL = process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';

const problem = (await postgresMissing(PG_URL)) ?? undefined;
if (problem !== undefined && process.env.CI === 'true') {
  throw new Error(`PostgreSQL is required under CI=true, but ${PG_URL} is not reachable: ${problem}`);
}
if (problem !== undefined) console.warn(`PostgreSQL tests skipped: no server at ${PG_URL} (${problem}); set ONCEBOX_TEST_PG`);

/** Whether the PostgreSQL tests run here; outside CI they skip, and say why, when no server answers. */
export const pgAvailable = problem === undefined;
export const pgSkipReason = problem === undefined ? '' : ` (skipped: no PostgreSQL at ${PG_URL})`;

const schemas: string[] = [];
let counter = 0;

/** A schema of this test's own, dropped when the test file ends. */
export function testSchema(): string {
  const schema = `oncebox_test_${process.pid}_${Date.now().toString(36)}_${counter++}`;
  schemas.push(schema);
  return schema;
}

afterAll(async () => {
  if (schemas.length === 0) return;
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  for (const schema of schemas.splice(0)) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
});
