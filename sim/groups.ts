import { existsSync } from 'node:fs';
import Database from 'better-sqlite3';
import { FencedError, openConsumer, type Consumer, type EventHandler } from '../src/consumer/index.js';
import type { ConsumerProcessArgs } from './consumer-process.js';
import { runSimProcess } from './processes.js';
import { until } from './waiting.js';
import { expect, Violation } from './violation.js';
import { QUIET_LOGGER, type Tenant, type World } from './world.js';

/** The failpoints a consumer process is killed at. */
export type ConsumerKillPoint = 'consume:before-handler' | 'commit:after-write' | 'consume:after-commit' | 'relay:after-response';

/**
 * What a group does with the tenant's events: a summariser reads `ready` events and, for each, records
 * its effect in its own database and emits one `summary` caused by it; a closer is a per-partition
 * trigger over `ready` and `done` that emits one `closed` event per partition once both are in, and,
 * when it refreshes, one more for each newer event of the partition. A closer keeps each firing it ran
 * in its own table (`firings`), committed with the firing, so that a handler run again shows.
 */
export type GroupKind = 'summariser' | 'closer';

/** What a group's consumer is given: its file, its servers and token, and what it reads and emits. */
export interface GroupSetup {
  path: string;
  servers: string[];
  token: string;
  group: string;
  kind: GroupKind;
  assets: string[];
  output: string;
  /** Rows its relay sends a request, one request at a time, when set: one lets a caused emission reach the server without the cursor beside it. */
  relayRows?: number;
  /** A closer's answer to a newer event for a partition it fired for. */
  onNewer: 'ignore' | 'refresh';
}

/** A closer's firing as it recorded it in its own file: the partition, which firing, and the cursor of the event that set it off. */
export interface RecordedFiring {
  partitionKey: string;
  firing: number;
  cursor: number;
}

/** Opens a group's consumer as the simulation's in-process consumers and its consumer processes do, its work attached. */
export async function openGroupConsumer(setup: GroupSetup): Promise<{ consumer: Consumer; handler: EventHandler | undefined }> {
  const consumer = await openConsumer({
    path: setup.path,
    server: setup.servers,
    token: setup.token,
    group: setup.group,
    assets: setup.assets,
    waitSeconds: 0.1,
    durability: 'normal',
    logger: QUIET_LOGGER,
    ...(setup.relayRows === undefined ? {} : { relay: { batchMaxRows: setup.relayRows, maxInFlight: 1 } }),
  });
  consumer.db.exec('CREATE TABLE IF NOT EXISTS effects (event_id TEXT NOT NULL, applied INTEGER NOT NULL)');
  if (setup.kind === 'closer') {
    consumer.db.exec('CREATE TABLE IF NOT EXISTS firings (partition_key TEXT NOT NULL, firing INTEGER NOT NULL, cursor INTEGER NOT NULL)');
    consumer.trigger({ when: setup.assets, by: 'partitionKey', onNewer: setup.onNewer }, (partitionKey, events, ctx) => {
      const cursor = Math.max(...events.map((event) => event.cursor));
      ctx.tx.db.prepare('INSERT INTO firings (partition_key, firing, cursor) VALUES (?, ?, ?)').run(partitionKey, ctx.firing, cursor);
      ctx.tx.emit(setup.output, { partitionKey, extra: { inputs: events.map((event) => event.eventId), firing: ctx.firing } });
    });
    return { consumer, handler: undefined };
  }
  // The summariser: the event's effect in its own database and one summary caused by it, in one commit.
  const handler: EventHandler = (event, ctx) => {
    ctx.commit((tx) => {
      tx.db.prepare('INSERT INTO effects (event_id, applied) VALUES (?, 1)').run(event.eventId);
      tx.emit(setup.output, { partitionKey: event.partitionKey! });
    });
  };
  return { consumer, handler };
}

/**
 * Whether a closer's triggers still have state to rebuild from the server (a fresh file's first run
 * does it, before any new event; a consumer without triggers plans one it never needs). Read from the consumer's own file: the simulation's bookkeeping of
 * G22's assumption, not a check.
 */
function rebuildPending(consumer: Consumer): boolean {
  const plan = consumer.db.prepare('SELECT up_to, done_through FROM trigger_rebuild WHERE id = 1').get() as { up_to: number; done_through: number } | undefined;
  return plan !== undefined && plan.done_through < plan.up_to;
}

/**
 * A tenant's consumer group. It runs until it has caught up, is stopped, or dies; a replacement runs on
 * the same file or a fresh one, sometimes while the consumer it replaces still runs (a zombie).
 */
export class SimGroup {
  consumer: Consumer | undefined;
  /** The summariser's handler for the open consumer; none for a closer (its trigger does the work). */
  private handler: EventHandler | undefined;
  path: string;
  /** Compaction removed events before this group last started on a fresh file: a rebuild cannot see them (G22's assumption). */
  rebuiltWithoutHistory = false;
  /**
   * Each file the group has consumed on and the server's cursor for the group before its first consumer
   * opened it: a rebuild on a fresh file replays at least that far, and runs no handler for what it replays.
   */
  readonly files = new Map<string, number>();

  constructor(
    private readonly world: World,
    readonly tenant: Tenant,
    readonly kind: GroupKind,
  ) {
    this.path = world.newPath(`${tenant.name}-${kind}`);
  }

  get name(): string {
    return `${this.tenant.name}-${this.kind}`;
  }

  /** The assets it reads. */
  get assets(): string[] {
    return this.kind === 'summariser' ? [this.tenant.assets.ready] : [this.tenant.assets.ready, this.tenant.assets.done];
  }

  /** The asset it emits to. */
  get output(): string {
    return this.kind === 'summariser' ? this.tenant.assets.summary : this.tenant.assets.closed;
  }

  private setup(): GroupSetup {
    return {
      path: this.path,
      servers: this.world.serverUrls,
      token: this.kind === 'summariser' ? this.tenant.tokens.consumer : this.tenant.tokens.closer,
      group: this.name,
      kind: this.kind,
      assets: this.assets,
      output: this.output,
      onNewer: this.tenant.closerOnNewer,
    };
  }

  async open(): Promise<Consumer> {
    if (this.consumer === undefined) {
      await this.noteFile();
      const opened = await openGroupConsumer(this.setup());
      this.consumer = opened.consumer;
      this.handler = opened.handler;
    }
    return this.consumer;
  }

  /** Notes the file it is about to consume on, the first time, with the server's cursor for the group now. */
  private async noteFile(): Promise<void> {
    if (!this.files.has(this.path)) this.files.set(this.path, await this.world.groupCursor(this.name));
  }

  /** The newest cursor among its assets' events now. */
  private async newest(): Promise<number> {
    return Math.max(...(await Promise.all(this.assets.map((asset) => this.world.newestCursor(asset)))));
  }

  /** Runs `consumer` until `done` says so (checked as it goes), or until it throws. */
  private async runUntil(consumer: Consumer, done: (handled: number) => boolean): Promise<void> {
    const stop = new AbortController();
    let handled = 0;
    const watcher = setInterval(() => {
      if (done(handled)) stop.abort();
    }, 5);
    const work = this.handler;
    try {
      if (work === undefined) await consumer.run({ signal: stop.signal });
      else {
        await consumer.run(
          (event, ctx) => {
            // Told to stop, a consumer stops after the event in hand: none is handed over after (G20).
            expect('G20', !stop.signal.aborted, () => `${this.name}: its handler was given event ${event.eventId} after the consumer was told to stop`);
            work(event, ctx);
            if (done(++handled)) stop.abort();
          },
          { signal: stop.signal },
        );
      }
    } finally {
      clearInterval(watcher);
    }
  }

  /** Consumes every event stored now (the newest cursor at the start), `stopAfter` events at most. */
  async catchUp(stopAfter = Number.POSITIVE_INFINITY): Promise<void> {
    const consumer = await this.open();
    const newest = await this.newest();
    // A closer on a fresh file rebuilds its triggers' state when it runs: it runs until that is done too,
    // as a consumer process would right after it opens (the rebuild needs the events the server still holds).
    const caughtUp = () => consumer.cursor >= newest && !(this.kind === 'closer' && rebuildPending(consumer));
    if (caughtUp()) return;
    await this.runUntil(consumer, (handled) => caughtUp() || handled >= stopAfter);
  }

  /**
   * The group's consumer lost its heartbeat, not its process: a replacement starts (on the same file or a
   * fresh one) and claims the group while the old one still runs. The old one goes on consuming what it
   * can and must stop with FencedError (G21), its effects and emissions kept out by the fence.
   */
  async replaceBesideZombie(sameFile: boolean): Promise<void> {
    const zombie = await this.open();
    if (!sameFile) this.moveToFreshFile();
    this.consumer = undefined;
    const replacement = await this.open();
    // The zombie is fenced at its next delivery, or, idle, at its next empty fetch: it may not outlive its
    // replacement catching up and a long-poll beyond it.
    const outcome = await this.runUntil(zombie, () => false).then(
      () => undefined,
      (error: unknown) => error,
    );
    try {
      if (!(outcome instanceof FencedError)) throw new Violation('G21', `${this.name}: the consumer of epoch ${zombie.epoch} went on beside its replacement of epoch ${replacement.epoch}: ${String(outcome)}`);
      this.world.happened(`consumer zombie fenced (${sameFile ? 'same file' : 'another machine'})`);
      await this.catchUp();
      // The fenced consumer's process lives on (it has not noticed, or will exit later): on a shared file its
      // relay must have let go, so that the replacement delivers now, not once a lease lapses.
      const delivered = await until(() => (replacement.status().pending === 0 ? true : undefined));
      if (delivered === undefined) throw new Violation('G21', `${this.name}: the replacement could not deliver its ${replacement.status().pending} rows while the fenced consumer lived on${sameFile ? ' on the same file' : ''}`);
    } finally {
      await zombie.close({ timeoutMs: 0 }).catch(() => undefined);
    }
  }

  /**
   * The group's consumer is a real process for a while: the in-process one stops, and a process of its
   * own on the same file consumes every event stored now, killed with SIGKILL at the `hit`-th pass of
   * `point` (before a handler, inside the consume commit, after it, or once the server stored what it
   * delivered). The next consumer of the group is in process again, on the same file (G20, G22).
   */
  async killedAt(point: ConsumerKillPoint, hit: number, relayRows?: number): Promise<void> {
    await this.stop();
    await this.noteFile();
    const args: ConsumerProcessArgs = { ...this.setup(), until: await this.newest(), ...(relayRows === undefined ? {} : { relayRows }) };
    const outcome = await runSimProcess('sim/consumer-process.ts', args, `${point}@${hit}`);
    this.world.happened(outcome.killed ? `consumer process killed at ${point}` : `consumer process not killed (${point} passed fewer than ${hit} times)`);
    if (!outcome.killed && outcome.code !== 0) throw new Violation('liveness', `${this.name}: its consumer process failed: ${outcome.code ?? outcome.signal} ${outcome.output.slice(-500)}`);
  }

  /**
   * Its consumer process, its relay sending one row a request, is killed once the server has answered
   * its second request (the one after its opening): an emission it caused is on the server, the cursor
   * committed with it is not. Then its
   * machine is lost, and the group starts again on a fresh file from the server's cursor: it handles
   * the event again, and its emission must be the same one, taken as a duplicate (G20).
   */
  async killedAfterFirstDeliveryThenLost(): Promise<void> {
    await this.killedAt('relay:after-response', 2, 1);
    await this.loseMachine();
    await this.catchUp();
  }

  /** How often its database says each event's effect was applied, while its file lives. */
  effects(): Map<string, number> {
    if (this.consumer === undefined) return new Map();
    const rows = this.consumer.db.prepare('SELECT event_id, count(*) AS n FROM effects GROUP BY event_id').all() as { event_id: string; n: number }[];
    return new Map(rows.map((row) => [row.event_id, row.n]));
  }

  /**
   * A closer's firings, as each file it consumed on recorded them, with the server's cursor for the group
   * before the file's first consumer opened it. Read from the files themselves: a lost machine's file is
   * left where it was, so its firings are read too.
   */
  firings(): { path: string; replayedTo: number; firings: RecordedFiring[] }[] {
    return [...this.files].filter(([path]) => existsSync(path)).map(([path, replayedTo]) => {
      const db = new Database(path, { readonly: true, fileMustExist: true });
      try {
        const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'firings'").get();
        const firings = table === undefined ? [] : (db.prepare('SELECT partition_key AS partitionKey, firing, cursor FROM firings').all() as RecordedFiring[]);
        return { path, replayedTo, firings };
      } finally {
        db.close();
      }
    });
  }

  /** It stops, its emissions left in its file for the next consumer on it (as a crash after a commit leaves them). */
  async stop(): Promise<void> {
    await this.consumer?.close({ timeoutMs: 0 });
    this.consumer = undefined;
  }

  /** Its machine is lost: the next consumer of the group starts on a fresh file, from the server's cursor. */
  async loseMachine(): Promise<void> {
    await this.stop();
    this.moveToFreshFile();
    this.world.happened(`${this.kind} lost its machine`);
  }

  private moveToFreshFile(): void {
    this.path = this.world.newPath(`${this.tenant.name}-${this.kind}`);
    if (this.world.eventsCompacted > 0) this.rebuiltWithoutHistory = true;
  }

  /** Delivers what it committed and closes: the group's last word before the checks. */
  async drain(): Promise<void> {
    const consumer = await this.open();
    await consumer.close({ timeoutMs: 30_000 });
    this.consumer = undefined;
  }
}
