import { execFile, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import pg from 'pg';
import pRetry from 'p-retry';
import { createServer, type OnceboxServer } from '../src/dedupe/index.js';
import { startFaultProxy, type FaultProxy } from '../src/testing/fault-proxy.js';

/** The logger of the simulation's jobs and consumers: their warnings are the faults it makes on purpose. */
export const QUIET_LOGGER = { info() {}, warn() {}, error() {} };

/** How long a run without an end may make no request before the catalog calls it stale. */
export const STALE_RUN_AFTER_MS = 24 * 3600_000;
/** How long the simulated server keeps events: the clock moves past it to make compaction remove some. */
export const EVENT_RETENTION_MS = 2 * 24 * 3600_000;
/** How long it keeps dedupe records: far past any retry of the simulation, as its assumption asks. */
const DEDUPE_RETENTION_MS = 3650 * 24 * 3600_000;
/** How long the simulated server lets a connection stay open without showing a token; its header timeout is far longer. */
export const UNAUTHENTICATED_MS = 1000;
let worlds = 0;
const execFileAsync = promisify(execFile);

/**
 * Whether a PostgreSQL world can be backed up and restored here (`pg_dump` and `pg_restore` on the PATH).
 * Without them its restore is skipped and said so, except under CI=true, where it is a failure.
 */
export function pgBackupToolsAvailable(): boolean {
  const available = ['pg_dump', 'pg_restore'].every((tool) => spawnSync(tool, ['--version']).status === 0);
  if (!available && process.env.CI === 'true') throw new Error('the simulation restores PostgreSQL worlds from pg_dump backups under CI=true, but pg_dump or pg_restore is missing');
  return available;
}

/**
 * One tenant of the simulated server: its jobs publish as `<name>-job`, its consumer group reads its own
 * events as `<name>-summariser`, and its reader reads only what is its own. Each has a token of its own.
 */
export interface Tenant {
  name: string;
  /** Its assets: events now, events held for a run's success, a consumer's caused events, a trigger's, and the misspelt one its job emits by mistake. */
  assets: { ready: string; done: string; summary: string; closed: string; typo: string };
  tokens: { job: string; consumer: string; closer: string; reader: string };
  /**
   * Its tasks publish the same partitions (`all.<batch>`), as tasks that each load a part of one day do;
   * otherwise each task's partitions carry its name (`<task>.<batch>`). Only the keys, which derive from
   * the task too, keep one task's event from being taken for another's (G3).
   */
  sharedPartitions: boolean;
  /**
   * What its closer (a per-partition trigger) does with a newer event for a partition it fired for:
   * ignore it, or fire again as a refresh (the second tenant's, so that both are always in a world).
   */
  closerOnNewer: 'ignore' | 'refresh';
}

/** A server answer the simulation saw pass through its network: every one must be below 500. */
export interface Answer {
  method: string;
  url: string;
  status: number;
}

/** Where the simulated server keeps its state: a SQLite file (one instance), or PostgreSQL (two instances over one schema). */
export type StoreKind = 'sqlite' | 'postgres';

/** The PostgreSQL the simulation's PostgreSQL worlds use: each world has a schema of its own, dropped at its end. */
export const SIM_PG_URL = process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';

/**
 * The world a simulation runs in: the server on a real SQLite file of its own, or two instances over one
 * PostgreSQL schema, on a clock the simulation moves, behind a fault proxy for the jobs' relays; its
 * tenants with their tokens. Everything is real (files, databases, HTTP on loopback, tokens); only the
 * clock and the faults are drawn.
 */
export class World {
  clock = Date.parse('2026-01-01T00:00:00Z');
  readonly dir = mkdtempSync(join(tmpdir(), 'oncebox-sim-'));
  readonly serverPath = join(this.dir, 'server.db');
  /** Its PostgreSQL schema, in a PostgreSQL world. */
  readonly schema: string | undefined;
  /** The server's instances: one on SQLite, two on PostgreSQL (one may be down while it fails over). */
  private readonly instances: (OnceboxServer | undefined)[] = [];
  private readonly urls: string[] = [];
  /** The instance the proxy, the readers and the simulation's own reads go to. */
  private active = 0;
  /** The jobs' way to the server: through the faults each relay step plans. */
  proxy!: FaultProxy;
  admin = '';
  readonly tenants: Tenant[] = [];
  /** Every answer of the server the proxy passed on: checked for 5xx. */
  readonly answers: Answer[] = [];
  /** How many events compaction has removed so far. */
  eventsCompacted = 0;
  /** What the faults and mistakes came to, counted, for the figures (a kill that struck, a token refused at open…). */
  readonly happenings = new Map<string, number>();
  private files = 0;
  private readonly newest = new Map<string, number>();

  constructor(
    private readonly tenantNames: readonly string[],
    readonly store: StoreKind = 'sqlite',
  ) {
    if (store === 'postgres') this.schema = `oncebox_sim_${process.pid}_${Date.now().toString(36)}_${worlds++}`;
  }

  readonly now = () => new Date(this.clock);

  /** The instance that is up and serving: what readers, consumers and the simulation's own reads use. */
  get server(): OnceboxServer {
    return this.instances[this.active]!;
  }

  /** Another instance than the serving one, where there are two (an operator's command may reach either); else the one. */
  get otherServer(): OnceboxServer {
    return this.instances.find((instance, i) => i !== this.active && instance !== undefined) ?? this.server;
  }

  /** The active instance's URL (no faults between it and readers or consumers). */
  get url(): string {
    return this.urls[this.active]!;
  }

  /** Every instance's URL: a consumer fails over between them as a deployment's clients do. */
  get serverUrls(): string[] {
    return [...this.urls];
  }

  async start(): Promise<void> {
    const count = this.store === 'postgres' ? 2 : 1;
    for (let i = 0; i < count; i++) await this.startInstance(i);
    this.proxy = await startFaultProxy(this.url, { onAnswer: (request, status) => this.answers.push({ ...request, status }) });
    this.admin = (await this.server.store.tokens.create({ scope: 'admin', note: 'the simulation' })).token;
    for (const name of this.tenantNames) {
      const assets = { ready: `${name}.ready`, done: `${name}.done`, summary: `${name}.summary`, closed: `${name}.closed`, typo: `${name}.raedy` };
      for (const asset of [assets.ready, assets.done, assets.summary, assets.closed]) await this.server.store.registerAsset(asset);
      const { store } = this.server;
      const tokens = {
        job: (await store.tokens.create({ scope: 'publish', producers: `${name}-job`, assets: [assets.ready, assets.done, assets.typo] })).token,
        consumer: (await store.tokens.create({ scope: 'publish', producers: `${name}-summariser`, assets: [assets.summary], consumes: [assets.ready] })).token,
        closer: (await store.tokens.create({ scope: 'publish', producers: `${name}-closer`, assets: [assets.closed], consumes: [assets.ready, assets.done] })).token,
        reader: (await store.tokens.create({ scope: 'read', reads: ['events', 'streams'], producers: `${name}-*`, assets: [assets.ready, assets.done, assets.summary, assets.closed] })).token,
      };
      // The second tenant's tasks share their partitions; the others' do not.
      this.tenants.push({ name, assets, tokens, sharedPartitions: this.tenants.length === 1, closerOnNewer: this.tenants.length === 1 ? 'refresh' : 'ignore' });
    }
  }

  private async startInstance(i: number): Promise<void> {
    const server = await createServer({
      db: this.store === 'postgres' ? SIM_PG_URL : this.serverPath,
      schema: this.schema,
      durability: 'normal',
      now: this.now,
      staleRunAfterMs: STALE_RUN_AFTER_MS,
      compactEveryMs: 0,
      eventRetentionMs: EVENT_RETENTION_MS,
      dedupeRetentionMs: DEDUPE_RETENTION_MS,
      streamRetentionMs: DEDUPE_RETENTION_MS,
      // Grants cached as a deployment caches them: a revocation must reach the instance's cache at once.
      tokenCacheMs: 60_000,
      rateLimit: false,
      // A connection that shows no token is closed soon; the header and request timeouts are far past
      // it, so that a neighbour's half-sent requests closed in time were closed for showing none.
      unauthenticatedTimeoutMs: UNAUTHENTICATED_MS,
      headersTimeoutMs: 120_000,
      requestTimeoutMs: 120_000,
    });
    // The same port after a restart: consumers and the proxy find the instance where it was.
    const port = this.urls[i] === undefined ? 0 : Number(new URL(this.urls[i]!).port);
    this.urls[i] = await server.listen({ port });
    this.instances[i] = server;
  }

  /** Refusals a mistake of the simulation's own asked for, by `<producer> <code>`: the catalog may show them. */
  readonly expectedRefusals = new Set<string>();

  /**
   * A request to the serving instance, tried again when the connection fails: a server restart closes the
   * connections a client kept open, and a client retries (only the server's answers are judged, never the network's).
   */
  fetch(path: string, init: RequestInit = {}): Promise<Response> {
    return this.fetchFrom(this.url, path, init);
  }

  /** As fetch, from the instance at `url`. */
  fetchFrom(url: string, path: string, init: RequestInit = {}): Promise<Response> {
    return pRetry(() => fetch(`${url}${path}`, init), {
      retries: 20,
      minTimeout: 5,
      maxTimeout: 100,
      shouldRetry: ({ error }) => error instanceof TypeError,
    });
  }

  /** The rows of the server's tokens table, read as a stolen backup would be: straight from its store. */
  async storedTokenRows(): Promise<unknown[]> {
    if (this.schema === undefined) {
      const db = new Database(this.serverPath, { readonly: true, fileMustExist: true });
      try {
        return db.prepare('SELECT * FROM tokens').all();
      } finally {
        db.close();
      }
    }
    const client = new pg.Client({ connectionString: SIM_PG_URL });
    await client.connect();
    try {
      return (await client.query(`SELECT * FROM "${this.schema}".tokens`)).rows;
    } finally {
      await client.end();
    }
  }

  happened(what: string): void {
    this.happenings.set(what, (this.happenings.get(what) ?? 0) + 1);
  }

  /** The cursor of `asset`'s newest event (0 before its first): read through the store, as its own reads page. */
  async newestCursor(asset: string): Promise<number> {
    let newest = this.newest.get(asset) ?? 0;
    for (;;) {
      const page = await this.server.store.listEvents({ asset, after: newest, limit: 1000 });
      const last = page.events.at(-1);
      if (last === undefined) break;
      newest = last.cursor;
    }
    this.newest.set(asset, newest);
    return newest;
  }

  /** A consumer group's cursor as the server mirrors it (0 before its first): what a rebuild on a fresh file replays up to, at least. */
  async groupCursor(producer: string): Promise<number> {
    const response = await this.fetch(`/v1/catalog/consumers?producer=${encodeURIComponent(producer)}`, { headers: { authorization: `Bearer ${this.admin}` } });
    if (response.status !== 200) throw new Error(`GET /v1/catalog/consumers answered ${response.status}`);
    const page = (await response.json()) as { items: { group: string; cursor: number }[] };
    return page.items.find((item) => item.group === producer)?.cursor ?? 0;
  }

  newPath(label: string): string {
    return join(this.dir, `${label}-${this.files++}.db`);
  }

  /**
   * The serving instance dies: what it acknowledged stays, what was in flight is lost with it. On SQLite
   * it starts again on its file; on PostgreSQL the proxy and the readers fail over to the other
   * instance at once, and the dead one starts again beside it.
   */
  async restartServer(): Promise<void> {
    const dead = this.active;
    await this.instances[dead]!.close();
    this.instances[dead] = undefined;
    if (this.instances.length > 1) {
      this.active = (dead + 1) % this.instances.length;
      this.proxy.setUpstream(this.url);
    }
    await this.startInstance(dead);
    this.proxy.setUpstream(this.url);
  }

  /**
   * A backup of the server's state, taken online as docs/operations.md says: SQLite's backup of its file
   * (never a copy of a live WAL file), or on PostgreSQL `pg_dump` of its schema.
   */
  async backup(): Promise<string> {
    if (this.schema !== undefined) {
      const path = join(this.dir, `backup-${this.files++}.dump`);
      await execFileAsync('pg_dump', ['--dbname', SIM_PG_URL, '--schema', this.schema, '--format', 'custom', '--file', path]);
      return path;
    }
    const path = join(this.dir, `backup-${this.files++}.db`);
    const db = new Database(this.serverPath, { readonly: true, fileMustExist: true });
    try {
      await db.backup(path);
    } finally {
      db.close();
    }
    return path;
  }

  /**
   * The server is stopped, its state replaced by `backup`, and started again on its port: it forgets what
   * came after. On PostgreSQL every instance stops, the schema is dropped and restored with `pg_restore`,
   * and each instance starts again.
   */
  async restore(backup: string): Promise<void> {
    if (this.schema !== undefined) {
      for (const [i, instance] of this.instances.entries()) {
        await instance?.close();
        this.instances[i] = undefined;
      }
      const client = new pg.Client({ connectionString: SIM_PG_URL });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA "${this.schema}" CASCADE`);
      } finally {
        await client.end();
      }
      await execFileAsync('pg_restore', ['--dbname', SIM_PG_URL, '--exit-on-error', backup]);
      for (let i = 0; i < this.instances.length; i++) await this.startInstance(i);
    } else {
      await this.instances[this.active]!.close();
      this.instances[this.active] = undefined;
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${this.serverPath}${suffix}`, { force: true });
      copyFileSync(backup, this.serverPath);
      await this.startInstance(this.active);
    }
    this.proxy.setUpstream(this.url);
    // Cursors past the backup's are handed out again.
    this.newest.clear();
  }

  /** Moves the clock past the events' retention and compacts: the oldest events go. */
  async compactPast(days: number): Promise<number> {
    this.clock += days * 24 * 3600_000;
    const removed = (await this.server.compact()).events;
    this.eventsCompacted += removed;
    return removed;
  }

  async stop(): Promise<void> {
    await this.proxy?.close();
    for (const instance of this.instances) await instance?.close();
    if (this.schema !== undefined) {
      const client = new pg.Client({ connectionString: SIM_PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${this.schema}" CASCADE`);
      await client.end();
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
