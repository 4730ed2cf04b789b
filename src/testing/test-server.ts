import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { v4 as uuidv4 } from 'uuid';
import { createServer, type OnceboxServer } from '../dedupe/server.js';
import type { EventPage, StoredEvent, StreamState } from '../protocol/wire.js';
import { startFaultProxy, type FaultProxy } from './fault-proxy.js';

/** What `startTestServer` takes. */
export interface TestServerOptions {
  /** The assets the server accepts: those the job publishes to, and any it consumes. */
  assets: string[];
  /**
   * A PostgreSQL database and a schema of the test's own instead of an embedded SQLite file (the schema is
   * created, and dropped by nobody: give each run its own). @defaultValue SQLite in a temporary folder
   */
  postgres?: { url: string; schema: string } | undefined;
}

/**
 * A real oncebox server for a test: on loopback, on an embedded SQLite file in a temporary folder (or a
 * PostgreSQL schema), with an admin token, behind a fault layer that drops, duplicates, delays and
 * refuses requests, or loses their answers after the server committed, as told (`faults.plan`).
 */
export interface TestServer {
  /** The server as clients see it: through the fault layer. */
  readonly url: string;
  /** The server itself, without faults: for the test's own reads and writes. */
  readonly directUrl: string;
  /** The fault layer: `plan(...faults)` for the next requests, in order. */
  readonly faults: FaultProxy;
  readonly adminToken: string;
  readonly server: OnceboxServer;
  /** A publish token of `producer`, to `assets` (every asset when left out), consuming `consumes`. */
  publishToken(producer: string, grant?: { assets?: string[] | undefined; consumes?: string[] | undefined }): Promise<string>;
  /** Every stored event, in cursor order; of one producer or asset when asked. */
  events(filter?: { producer?: string; asset?: string }): Promise<StoredEvent[]>;
  /** A stream's state: its epoch, positions and mirrored checkpoints; undefined when it never delivered. */
  streamState(producer: string, runId: string, task?: string | null): Promise<StreamState | undefined>;
  /** Stores events of `asset`, one per partition key, as producer `source`: the input of a consumer under test. */
  publish(asset: string, partitionKeys: string[], producer?: string): Promise<StoredEvent[]>;
  /** Stops the fault layer and the server, and removes the temporary folder. */
  close(): Promise<void>;
}

/** Starts a test server on loopback. Close it when the test is done. */
export async function startTestServer(options: TestServerOptions): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'oncebox-testing-'));
  const adminToken = `admin-${uuidv4()}`;
  const server = await createServer({
    ...(options.postgres ? { db: options.postgres.url, schema: options.postgres.schema } : { db: join(dir, 'server.db') }),
    assets: options.assets,
    token: adminToken,
    // A test runs many requests and many runs from one token: the server's limits are not under test.
    rateLimit: false,
    newStreamsPerMinute: 1_000_000,
    // No fsync per batch: a test server's durability is not what is tested, and it halves each run.
    durability: 'normal',
  });
  const directUrl = await server.listen({ port: 0, host: '127.0.0.1' });
  const faults = await startFaultProxy(directUrl);
  const admin = { authorization: `Bearer ${adminToken}` };
  const get = async <T>(route: string): Promise<T | undefined> => {
    const response = await fetch(new URL(route, `${directUrl}/`), { headers: admin });
    if (response.status === 404) return undefined;
    if (!response.ok) throw new Error(`GET ${route} answered ${response.status}: ${await response.text()}`);
    return (await response.json()) as T;
  };
  const events = async (filter: { producer?: string; asset?: string } = {}): Promise<StoredEvent[]> => {
    const all: StoredEvent[] = [];
    for (let after = 0; ; ) {
      const query = new URLSearchParams({ after: String(after), limit: '1000', ...(filter.asset ? { asset: filter.asset } : {}) });
      const page = (await get<EventPage>(`v1/events?${query}`))!;
      all.push(...page.events);
      if (page.events.length === 0) return filter.producer === undefined ? all : all.filter((event) => event.producer === filter.producer);
      after = page.next;
    }
  };
  return {
    url: faults.url,
    directUrl,
    faults,
    adminToken,
    server,
    async publishToken(producer, grant = {}) {
      const { token } = await server.store.tokens.create({
        scope: 'publish',
        producers: producer,
        ...(grant.assets ? { assets: grant.assets } : {}),
        ...(grant.consumes && grant.consumes.length > 0 ? { consumes: grant.consumes } : {}),
      });
      return token;
    },
    events,
    streamState: (producer, runId, task = null) =>
      get<StreamState>(`v1/streams/${encodeURIComponent(producer)}/${encodeURIComponent(runId)}${task === null ? '' : `?task=${encodeURIComponent(task)}`}`),
    async publish(asset, partitionKeys, producer = 'source') {
      const stream = { producer, workflow: 'oncebox-testing', runId: uuidv4(), task: null, attempt: 1 };
      const items = partitionKeys.map((partitionKey, index) => ({ seq: index + 1, key: uuidv4(), kind: 'event', asset, partitionKey }));
      const response = await fetch(`${directUrl}/v1/emissions`, {
        method: 'POST',
        headers: { ...admin, 'content-type': 'application/json' },
        body: JSON.stringify({ stream, items }),
      });
      const answer = (await response.json()) as { results?: { status: string }[] };
      if (!response.ok || answer.results?.some((result) => result.status !== 'accepted')) {
        throw new Error(`publishing the test's source events was refused: ${JSON.stringify(answer)}`);
      }
      return (await events({ producer })).filter((event) => event.runId === stream.runId);
    },
    async close() {
      await faults.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
