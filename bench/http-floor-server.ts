/**
 * The least an HTTP ingest server can do, for the benchmark's reference: parse the JSON batch, insert
 * its keys first with the raw benchmark's very statement, and answer each item. No validation, no
 * fingerprint, no event row, no stream state. Whatever oncebox's server reaches, this bounds from above.
 *
 * tsx bench/http-floor-server.ts <postgres-url> <schema>
 */
import Fastify from 'fastify';
import pg from 'pg';
import { Limits } from '../src/protocol/limits.js';
import { createRawDedupeTable, rawInsert } from './raw-insert.js';

const [url, schema] = process.argv.slice(2);
if (!url || !schema) throw new Error('usage: http-floor-server.ts <postgres-url> <schema>');

interface Batch {
  items: { seq: number; key: string }[];
}

const pool = new pg.Pool({ connectionString: url, max: 10 });
await createRawDedupeTable(pool, schema);
const app = Fastify({ bodyLimit: Limits.maxBodyBytes });
app.post<{ Body: Batch }>('/v1/emissions', async (request) => {
  const { items } = request.body;
  const ts = new Date().toISOString();
  await rawInsert(pool, schema, items.map((item) => item.key));
  return { results: items.map((item) => ({ status: 'accepted', seq: item.seq, key: item.key, eventId: item.key, timestamp: ts })) };
});
await app.listen({ port: 0, host: '127.0.0.1' });
const address = app.server.address();
if (address === null || typeof address === 'string') throw new Error('not listening on TCP');
console.log(JSON.stringify({ url: `http://127.0.0.1:${address.port}` }));
process.once('SIGTERM', () => {
  void app.close().then(() => pool.end()).then(() => process.exit(0));
});
