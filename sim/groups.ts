import { FencedError, openConsumer, type Consumer, type EventHandler } from '../src/consumer/index.js';
import { Violation } from './violation.js';
import { QUIET_LOGGER, type Tenant, type World } from './world.js';

/**
 * What a group does with the tenant's events: a summariser reads `ready` events and, for each, records
 * its effect in its own database and emits one `summary` caused by it; a closer is a per-partition
 * trigger over `ready` and `done` that emits one `closed` event per partition once both are in.
 */
export type GroupKind = 'summariser' | 'closer';

/**
 * A tenant's consumer group. It runs until it has caught up, is stopped, or dies; a replacement runs on
 * the same file or a fresh one, sometimes while the consumer it replaces still runs (a zombie).
 */
export class SimGroup {
  consumer: Consumer | undefined;
  path: string;
  /** Compaction removed events before this group last started on a fresh file: a rebuild cannot see them (G22's assumption). */
  rebuiltWithoutHistory = false;

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

  private async openOne(): Promise<Consumer> {
    const consumer = await openConsumer({
      path: this.path,
      server: this.world.serverUrls,
      token: this.kind === 'summariser' ? this.tenant.tokens.consumer : this.tenant.tokens.closer,
      group: this.name,
      assets: this.assets,
      waitSeconds: 0.1,
      durability: 'normal',
      logger: QUIET_LOGGER,
    });
    consumer.db.exec('CREATE TABLE IF NOT EXISTS effects (event_id TEXT NOT NULL, applied INTEGER NOT NULL)');
    if (this.kind === 'closer') {
      consumer.trigger({ when: this.assets, by: 'partitionKey' }, (partitionKey, events, ctx) => {
        ctx.tx.emit(this.output, { partitionKey, extra: { inputs: events.map((event) => event.eventId) } });
      });
    }
    return consumer;
  }

  async open(): Promise<Consumer> {
    this.consumer ??= await this.openOne();
    return this.consumer;
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
    const handler: EventHandler = (event, ctx) => {
      ctx.commit((tx) => {
        tx.db.prepare('INSERT INTO effects (event_id, applied) VALUES (?, 1)').run(event.eventId);
        tx.emit(this.output, { partitionKey: event.partitionKey! });
      });
      if (done(++handled)) stop.abort();
    };
    try {
      if (this.kind === 'summariser') await consumer.run(handler, { signal: stop.signal });
      else await consumer.run({ signal: stop.signal });
    } finally {
      clearInterval(watcher);
    }
  }

  /** Consumes every event stored now (the newest cursor at the start), `stopAfter` events at most. */
  async catchUp(stopAfter = Number.POSITIVE_INFINITY): Promise<void> {
    const consumer = await this.open();
    const newest = await this.newest();
    if (consumer.cursor >= newest) return;
    await this.runUntil(consumer, (handled) => consumer.cursor >= newest || handled >= stopAfter);
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
    const newest = await this.newest();
    // The zombie is fenced at its next delivery, or, idle, at its next empty fetch: it may not outlive its
    // replacement catching up and a long-poll beyond it.
    const outcome = await this.runUntil(zombie, () => false).then(
      () => undefined,
      (error: unknown) => error,
    );
    await zombie.close({ timeoutMs: 0 }).catch(() => undefined);
    if (!(outcome instanceof FencedError)) throw new Violation('G21', `${this.name}: the consumer of epoch ${zombie.epoch} went on beside its replacement of epoch ${replacement.epoch}: ${String(outcome)}`);
    this.world.happened(`consumer zombie fenced (${sameFile ? 'same file' : 'another machine'})`);
    if (replacement.cursor < newest) await this.catchUp();
  }

  /** How often its database says each event's effect was applied, while its file lives. */
  effects(): Map<string, number> {
    if (this.consumer === undefined) return new Map();
    const rows = this.consumer.db.prepare('SELECT event_id, count(*) AS n FROM effects GROUP BY event_id').all() as { event_id: string; n: number }[];
    return new Map(rows.map((row) => [row.event_id, row.n]));
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
