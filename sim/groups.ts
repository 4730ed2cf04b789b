import { openConsumer, type Consumer, type StoredEvent } from '../src/consumer/index.js';
import { QUIET_LOGGER, type Tenant, type World } from './world.js';


/**
 * A tenant's consumer group: it reads the tenant's `ready` events and, for each, records its effect in
 * its own database and emits one `summary` event caused by it, both inside the consume transaction. It
 * runs until it has caught up, is stopped, or dies; a replacement runs on the same file or a fresh one.
 */
export class SimGroup {
  consumer: Consumer | undefined;
  path: string;

  constructor(
    private readonly world: World,
    readonly tenant: Tenant,
  ) {
    this.path = world.newPath(`${tenant.name}-group`);
  }

  get name(): string {
    return `${this.tenant.name}-summariser`;
  }

  async open(): Promise<Consumer> {
    this.consumer ??= await openConsumer({
      path: this.path,
      server: this.world.url,
      token: this.tenant.tokens.consumer,
      group: this.name,
      assets: [this.tenant.assets.ready],
      waitSeconds: 0.1,
      durability: 'normal',
      logger: QUIET_LOGGER,
    });
    this.consumer.db.exec('CREATE TABLE IF NOT EXISTS effects (event_id TEXT NOT NULL, applied INTEGER NOT NULL)');
    return this.consumer;
  }

  /** Consumes every event stored now (the newest cursor at the start), `stopAfter` events at most. */
  async catchUp(stopAfter = Number.POSITIVE_INFINITY): Promise<void> {
    const consumer = await this.open();
    const newest = await this.world.newestCursor(this.tenant.assets.ready);
    if (consumer.cursor >= newest) return;
    const stop = new AbortController();
    let handled = 0;
    const watcher = setInterval(() => {
      if (consumer.cursor >= newest) stop.abort();
    }, 5);
    try {
      await consumer.run(
        (event: StoredEvent, ctx) => {
          ctx.commit((tx) => {
            tx.db.prepare('INSERT INTO effects (event_id, applied) VALUES (?, 1)').run(event.eventId);
            tx.emit(this.tenant.assets.summary, { partitionKey: event.partitionKey! });
          });
          if (++handled >= stopAfter) stop.abort();
        },
        { signal: stop.signal },
      );
    } finally {
      clearInterval(watcher);
    }
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
    this.path = this.world.newPath(`${this.tenant.name}-group`);
  }

  /** Delivers what it committed and closes: the group's last word before the checks. */
  async drain(): Promise<void> {
    const consumer = await this.open();
    await consumer.close({ timeoutMs: 30_000 });
    this.consumer = undefined;
  }
}
