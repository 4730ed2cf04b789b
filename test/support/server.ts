import { join } from 'node:path';
import { afterEach } from 'vitest';
import { createServer, type OnceboxServer, type ServerOptions } from '../../src/dedupe/index.js';
import type { StoredEvent } from '../../src/protocol/wire.js';
import { PG_URL, testSchema } from './postgres.js';
import { tempDir } from './temp.js';
import { allEvents, allRejections } from '../../scripts/events.js';
import { isLifecycleAsset } from '../../src/protocol/lifecycle.js';
import type { Rejection } from '../../src/protocol/catalog.js';

export type Backend = 'sqlite' | 'postgres';

export interface RunningServer {
  server: OnceboxServer;
  url: string;
  dbPath: string;
  events(query?: { asset?: string }): Promise<StoredEvent[]>;
  /**
   * The lifecycle events (`oncebox.run_*`) the server refused. G25 allows none: a zombie's are fenced,
   * not refused, and every other notice says what a terminal commit wrote.
   */
  refusedNotices(): Promise<Rejection[]>;
  close(): Promise<void>;
}

const running: OnceboxServer[] = [];

/**
 * A real oncebox server on loopback, over a SQLite file of this test's own or, with `backend:
 * 'postgres'`, a PostgreSQL schema of its own. Closed after the test.
 */
export async function startServer(options: Partial<ServerOptions> & { port?: number; backend?: Backend } = {}): Promise<RunningServer> {
  const { port, backend = 'sqlite', ...rest } = options;
  const pgOptions = backend === 'postgres' && rest.db === undefined ? { db: PG_URL, schema: testSchema() } : {};
  const dbPath = rest.db ?? pgOptions.db ?? join(tempDir(), 'server.db');
  const server = await createServer({ assets: ['batch_ready', 'run_done'], ...pgOptions, ...rest, db: dbPath });
  running.push(server);
  const url = await server.listen({ port: port ?? 0 });
  return {
    server,
    url,
    dbPath,
    events: (query) => allEvents(url, query),
    refusedNotices: async () => (await allRejections(url)).filter((rejection) => rejection.asset !== null && isLifecycleAsset(rejection.asset)),
    close: () => server.close(),
  };
}

export { allEvents, allRejections };

afterEach(async () => {
  for (const server of running.splice(0)) await server.close();
});
