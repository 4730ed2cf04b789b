import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { forwardedKey, openAirflowForwarder, type AirflowForwarderOptions } from '../src/airflow/index.js';
import type { StoredEvent } from '../src/protocol/wire.js';
import { startFaultProxy, type FaultProxy } from '../src/testing/fault-proxy.js';
import { airflowInstalled, startAirflow, type RunningAirflow } from '../scripts/airflow/harness.js';
import type { ForwarderProcessArgs } from './forwarder-process.js';
import { runSimProcess } from './processes.js';
import { expect, Violation } from './violation.js';
import { QUIET_LOGGER, type Tenant, type World } from './world.js';

/**
 * The Airflow asset every world forwards its closers' firings to (airflow/dags/oncebox_sim.py): no DAG
 * runs on it. Not the summaries: a summary has its cause's partition key, and the console's reading
 * publishes one of 512 characters, which Airflow refuses (its bound is 250) and the forwarder stops at.
 */
const AIRFLOW_ASSET = 'sim_forwarded';

/** Where the forwarder process is killed: before a post, or after Airflow stored it and before its receipt is recorded. */
export type ForwarderKillPoint = 'forward:before-post' | 'forward:after-post';

let airflow: Promise<{ running: RunningAirflow; home: string }> | undefined;

/**
 * One real Airflow for the simulation's process, started at its first use (a minute or so) and kept for
 * every campaign after: its asset events of each world are told apart by their oncebox keys, which derive
 * from event ids no other world has.
 */
function simAirflow(): Promise<RunningAirflow> {
  airflow ??= (async () => {
    const home = mkdtempSync(join(tmpdir(), 'oncebox-sim-airflow-'));
    const running = await startAirflow({ name: `sim_${process.pid}`, dir: home });
    await running.admin.waitForDags(['oncebox_sim_assets'], 120_000);
    return { running, home };
  })();
  return airflow.then(({ running }) => running);
}

/** Starts the simulation's Airflow now, if it has not: before a scenario that forwards, so that its start is not counted against an operation's time. */
export async function startSimAirflow(): Promise<void> {
  await simAirflow();
}

/** Stops the simulation's Airflow, if it started one. */
export async function closeSimAirflow(): Promise<void> {
  const started = airflow;
  airflow = undefined;
  const up = await started?.catch(() => undefined);
  if (up === undefined) return;
  await up.running.stop();
  rmSync(up.home, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
}

/**
 * Whether the simulation can run Airflow here. Without it the forwarding is skipped and said so, except
 * under CI=true, where it is a failure.
 */
export function simAirflowAvailable(): boolean {
  if (airflowInstalled()) return true;
  if (process.env.CI === 'true') throw new Error('the simulation forwards to a real Airflow under CI=true, but .airflow/venv has none: run airflow/install.sh');
  return false;
}

/**
 * A tenant's Airflow forwarder (G24): the tenant's `closed` events (its closer's firings), each forwarded
 * to Airflow as one asset event, through a fault proxy that loses Airflow's answers, by a process killed
 * at its failpoints and by its successor on the same file or a fresh machine. Each is in Airflow once,
 * found by its key.
 */
export class SimForwarder {
  path: string;
  private token: string | undefined;
  private proxy: FaultProxy | undefined;
  /** Keys of the tenant's firings compaction removed before this forwarder started: it can never see them (G15's assumption). */
  private readonly goneBeforeStart = new Set<string>();
  /** What its last catch-up left: its cursor and the receipts in its file, for a failure's report. */
  private last = { cursor: 0, until: 0, receipts: [] as { cursor: number; key: string; found: boolean }[] };
  /** The answer to the next post of an asset event is lost (Airflow stored it): the forwarder must look before posting again. */
  private losePost = false;

  constructor(
    private readonly world: World,
    readonly tenant: Tenant,
  ) {
    this.path = world.newPath(`${tenant.name}-forwarder`);
  }

  get name(): string {
    return `${this.tenant.name}-forwarder`;
  }

  /** Its options, to Airflow through its fault proxy. */
  private async options(): Promise<Omit<AirflowForwarderOptions, 'logger'>> {
    const running = await simAirflow();
    // Only a post's answer is lost: a sign-in Airflow does not answer fails the forwarder's open, as documented.
    this.proxy ??= await startFaultProxy(running.url, {
      choose: (request) => {
        if (!this.losePost || request.method !== 'POST' || !request.url.includes('/assets/events')) return undefined;
        this.losePost = false;
        return 'drop-response';
      },
    });
    this.token ??= (await this.world.server.store.tokens.create({ scope: 'publish', producers: this.name, consumes: [this.tenant.assets.closed] })).token;
    return {
      path: this.path,
      server: this.world.serverUrls,
      airflow: this.proxy.url,
      credentials: { username: running.username, password: running.password },
      map: { [this.tenant.assets.closed]: AIRFLOW_ASSET },
      group: this.name,
      token: this.token,
      settleMs: 200,
      retryMaxDelayMs: 200,
      waitSeconds: 0.1,
    };
  }

  /**
   * A forwarder process on its file forwards every firing stored now, Airflow's answer to its first post
   * lost, and is killed with SIGKILL at the `hit`-th pass of `point`.
   */
  async killedAt(point: ForwarderKillPoint, hit: number): Promise<void> {
    const args: ForwarderProcessArgs = { options: await this.options(), until: await this.world.newestCursor(this.tenant.assets.closed) };
    this.losePost = true;
    const outcome = await runSimProcess('sim/forwarder-process.ts', args, `${point}@${hit}`);
    this.losePost = false;
    this.world.happened(outcome.killed ? `forwarder process killed at ${point}` : `forwarder process not killed (${point} passed fewer than ${hit} times)`);
    if (!outcome.killed && outcome.code !== 0) throw new Violation('liveness', `${this.name}: its process failed: ${outcome.code ?? outcome.signal} ${outcome.output.slice(-500)}`);
  }

  /**
   * Notes, as the forwarder starts, which of the firings the checker has seen (`history`) compaction has
   * removed from the server already: a consumer keeps up only from its start.
   */
  async noteStart(history: readonly StoredEvent[]): Promise<void> {
    const stored = new Set<string>();
    for (let after = 0; ; ) {
      const page = await this.world.server.store.listEvents({ asset: this.tenant.assets.closed, after, limit: 1000 });
      for (const event of page.events) stored.add(event.key);
      if (page.events.length === 0) break;
      after = page.events.at(-1)!.cursor;
    }
    for (const event of history) if (event.asset === this.tenant.assets.closed && !stored.has(event.key)) this.goneBeforeStart.add(event.key);
  }

  /** Its machine is lost: the next forwarder starts on a fresh file, from the server's cursor. */
  loseMachine(): void {
    this.path = this.world.newPath(`${this.tenant.name}-forwarder`);
    this.world.happened('forwarder lost its machine');
  }

  /** A forwarder in process on its file forwards every firing stored now, Airflow's answer to its first post lost. */
  async catchUp(): Promise<void> {
    const until = await this.world.newestCursor(this.tenant.assets.closed);
    const forwarder = await openAirflowForwarder({ ...(await this.options()), logger: QUIET_LOGGER });
    try {
      if (forwarder.cursor >= until) return;
      this.losePost = true;
      const stop = new AbortController();
      const watcher = setInterval(() => {
        if (forwarder.cursor >= until) stop.abort();
      }, 5);
      try {
        await forwarder.run({ signal: stop.signal });
      } finally {
        clearInterval(watcher);
        this.losePost = false;
      }
    } finally {
      this.last = { cursor: forwarder.cursor, until, receipts: forwarder.receipts().map((receipt) => ({ cursor: receipt.cursor, key: receipt.key, found: receipt.foundByLookup })) };
      await forwarder.close({ timeoutMs: 30_000 });
    }
  }

  /**
   * G24: each of the tenant's firings the server showed (`history`) is in Airflow once at most, and,
   * once the forwarder has caught up, exactly once.
   */
  async check(history: readonly StoredEvent[], final: boolean): Promise<void> {
    const running = await simAirflow();
    const firings = history.filter((event) => event.asset === this.tenant.assets.closed);
    const ours = new Set(firings.map((event) => event.key));
    const counts = new Map<string, number>();
    for (const event of await running.admin.assetEvents(await running.admin.assetId(AIRFLOW_ASSET))) {
      const key = forwardedKey(event);
      if (key !== undefined && ours.has(key)) counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    const twice = [...counts].filter(([, n]) => n > 1);
    expect('G24', twice.length === 0, () => `${this.name}: firings in Airflow more than once: ${JSON.stringify(twice.slice(0, 3))}`);
    if (final) {
      const missing = firings.filter((event) => !counts.has(event.key) && !this.goneBeforeStart.has(event.key)).map((event) => [event.partitionKey, event.cursor]);
      expect('G24', missing.length === 0, () => `${this.name}: caught up, yet firings never reached Airflow: ${JSON.stringify(missing.slice(0, 5))} of ${firings.length}; its last catch-up went to cursor ${this.last.cursor} (of ${this.last.until}) on ${this.path}, its receipts ${JSON.stringify(this.last.receipts.slice(-8))}`);
    }
  }

  async close(): Promise<void> {
    await this.proxy?.close();
    this.proxy = undefined;
  }
}
