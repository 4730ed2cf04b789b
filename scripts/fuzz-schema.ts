/**
 * npm run fuzz:schema [-- --examples N] [-- --stores sqlite,postgres] [-- --seed S]: schema-driven fuzzing
 * of the server with schemathesis (pinned in fuzz/requirements.txt, installed by fuzz/install.sh into
 * .schemathesis/venv). For each store, it starts a real server on loopback, makes an admin, a publish and
 * a read token, and runs schemathesis against the server's own /openapi.json with each token, every
 * check on: no 5xx, every status and body as the document says, data the document calls invalid refused
 * and data it calls valid taken, 405 for a method a route does not have. It ends with one line per run,
 * and exits non-zero if any found a failure. `.ci/run` runs a short one; a long one is
 * `npm run fuzz:schema -- --examples 500`.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createServer } from '../src/dedupe/index.js';

const { values } = parseArgs({
  options: {
    examples: { type: 'string', default: '40' },
    stores: { type: 'string', default: 'sqlite,postgres' },
    seed: { type: 'string', default: String(Date.now() % 100_000) },
    'max-time': { type: 'string', default: '120' },
  },
  strict: true,
});
const repo = fileURLToPath(new URL('..', import.meta.url));
const schemathesis = join(repo, '.schemathesis/venv/bin/schemathesis');
if (!existsSync(schemathesis)) {
  console.error('fuzz:schema: schemathesis is not installed; run bash fuzz/install.sh');
  process.exit(2);
}
const PG_URL = process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';

async function pgSchema(): Promise<string> {
  const schema = `oncebox_fuzz_${process.pid}`;
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
  return schema;
}

function run(args: string[]): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(schemathesis, args, { stdio: 'inherit', env: { ...process.env, NO_COLOR: '1', SCHEMATHESIS_TELEMETRY: 'false' } });
    child.on('close', (code) => resolve(code ?? 1));
  });
}

console.log(`fuzz:schema: seed ${values.seed}, ${values.examples} examples per operation (replay with -- --seed ${values.seed})`);
const results: string[] = [];
let failed = false;
for (const store of values.stores.split(',')) {
  const db = store === 'postgres' ? PG_URL : join(repo, `.schemathesis/fuzz-${process.pid}.db`);
  const server = await createServer({
    db,
    ...(store === 'postgres' ? { schema: await pgSchema() } : {}),
    assets: ['batch_ready', 'run_done'],
    rateLimit: { max: 100_000, windowMs: 10_000 },
    compactEveryMs: 0,
  });
  const url = await server.listen({ port: 0 });
  const tokens = {
    admin: (await server.store.tokens.create({ scope: 'admin' })).token,
    publish: (await server.store.tokens.create({ scope: 'publish', producers: 'fuzz-*', consumes: ['batch_ready'] })).token,
    read: (await server.store.tokens.create({ scope: 'read', reads: ['events', 'streams', 'metrics'] })).token,
  };
  try {
    for (const [name, token] of Object.entries(tokens)) {
      const code = await run([
        '--config-file',
        fileURLToPath(new URL('../fuzz/schemathesis.toml', import.meta.url)),
        'run',
        `${url}/openapi.json`,
        '--checks',
        'all',
        '--phases',
        'examples,coverage,fuzzing',
        '--max-examples',
        values.examples,
        '--seed',
        values.seed,
        '--max-time',
        values['max-time'],
        '--workers',
        '1',
        '--header',
        `Authorization: Bearer ${token}`,
        // A waiting read may be held for up to 30 s, as the document says.
        '--request-timeout',
        '35',
        '--max-response-time',
        '35',
        '--no-color',
      ]);
      results.push(`fuzz:schema: ${store} with the ${name} token: ${code === 0 ? 'no failures' : `failures (exit ${code})`}`);
      failed ||= code !== 0;
    }
  } finally {
    await server.close();
  }
}
for (const line of results) console.log(line);
process.exit(failed ? 1 : 0);
