import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { assetNameSchema } from '../protocol/emission.js';
import { Limits } from '../protocol/limits.js';
import { resolveOptions } from '../protocol/options.js';
import { buildHttpApp } from './http-app.js';
import { SqliteDedupeStore } from './sqlite-store.js';
import type { DedupeStore } from './store.js';

const serverOptionsSchema = z.strictObject({
  /** Path of the server's SQLite file. */
  db: z.string().min(1),
  /** Assets to register at start; more can be added with `PUT /v1/assets/:name`. */
  assets: z.array(assetNameSchema).default([]),
  /** When set, every `/v1/` request must carry `Authorization: Bearer <token>`. */
  token: z.string().min(8, { error: 'must be at least 8 characters' }).optional(),
  /** @defaultValue 'full': every acknowledged batch survives a power cut. */
  durability: z.enum(['full', 'normal']).default('full'),
  /** @defaultValue 8 MiB */
  bodyLimit: z.number().int().min(1024).default(Limits.maxBodyBytes),
  /** @defaultValue 1000 */
  maxBatchItems: z.number().int().min(1).max(100_000).default(Limits.maxBatchItems),
  /** Fastify's logger setting; off by default, since a library should not print. */
  logger: z.union([z.boolean(), z.record(z.string(), z.unknown())]).default(!!process.env.ONCEBOX_DEBUG),
  /** The store's clock; for tests. */
  now: z.custom<() => Date>((value) => typeof value === 'function', { error: 'must be a function returning a Date' }).optional(),
});

export type ServerOptions = z.input<typeof serverOptionsSchema>;

export interface OnceboxServer {
  readonly app: FastifyInstance;
  readonly store: DedupeStore;
  /** Starts listening (loopback by default) and resolves to the base URL, e.g. http://127.0.0.1:8787. */
  listen(options?: { port?: number; host?: string }): Promise<string>;
  /** Stops taking requests, lets those in flight finish, then closes the store. */
  close(): Promise<void>;
}

export async function createServer(options: ServerOptions): Promise<OnceboxServer> {
  const resolved = resolveOptions(serverOptionsSchema, options, 'createServer');
  const store = new SqliteDedupeStore({ path: resolved.db, durability: resolved.durability, now: resolved.now });
  for (const asset of resolved.assets) await store.registerAsset(asset);
  const app = buildHttpApp({
    store,
    token: resolved.token,
    bodyLimit: resolved.bodyLimit,
    maxBatchItems: resolved.maxBatchItems,
    logger: resolved.logger,
  });
  let closed: Promise<void> | undefined;
  return {
    app,
    store,
    async listen({ port = 0, host = '127.0.0.1' } = {}) {
      await app.listen({ port, host });
      const address = app.server.address();
      if (address === null || typeof address === 'string') throw new Error('server is not listening on TCP');
      const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      return `http://${shownHost}:${address.port}`;
    },
    close() {
      closed ??= app.close().then(() => store.close());
      return closed;
    },
  };
}
