import { setTimeout as sleep } from 'node:timers/promises';
import type Database from 'better-sqlite3';
import { z } from 'zod';
import type { Checkpoint } from '../checkpoint/checkpoint.js';
import type { CommitTransaction } from '../outbox/commit/commit.js';
import { failpoint } from '../failpoints/failpoints.js';
import { assertSyncCallback, refusePromise } from '../outbox/commit/sync-callback.js';
import type { CloseResult, Outbox } from '../outbox/outbox.js';
import { TOKEN_CHECK_MS } from '../client/server-client.js';
import { openResolvedOutbox } from '../outbox/open.js';
import { resolveOutboxOptions } from '../outbox/options.js';
import { runKeyOf } from '../outbox/run.js';
import { defaultLogger } from '../client/logger.js';
import { FailureStreak } from '../client/failure-streak.js';
import { ServerClient } from '../client/server-client.js';
import { tokenFromEnvironment } from '../client/token.js';
import { CredentialsError, FencedError, OptionsError } from '../protocol/errors.js';
import { resolveOptions } from '../protocol/options.js';
import type { StoredEvent } from '../protocol/wire.js';
import { consumerOptionsSchema, type ConsumerOptions, type ResolvedConsumerOptions } from './options.js';

export type { ConsumerOptions } from './options.js';
// The cursor and the assets consumed are mirrored to the server like a job's checkpoints.
import { CONSUMER_ASSETS_CHECKPOINT, CONSUMER_CURSOR_CHECKPOINT } from '../protocol/catalog.js';
import { ConsumeTransaction } from './consume-transaction.js';
import { consumerStatements, type ConsumerStatements } from './statements.js';
import { Trigger, type TriggerHandler, type TriggerSpec } from './triggers.js';

/** The workflow name of a consumer group's stream on the server. */
const CONSUMER_WORKFLOW = 'oncebox-consumer';

/** What a handler gets besides its events. */
export interface ConsumeContext {
  /**
   * Commits `fn`'s writes and emissions in one SQLite transaction with the cursor advance and the
   * processed marks: each event's effect is applied exactly once. At most once per handler call; if the
   * handler never calls it, the consumer commits the cursor alone when the handler returns.
   */
  commit<R>(fn: (tx: ConsumeTransaction) => R): R;
}

export type EventHandler = (event: StoredEvent, ctx: ConsumeContext) => unknown;
export type BatchHandler = (events: StoredEvent[], ctx: ConsumeContext) => unknown;

export interface ConsumeOptions {
  /** Stops the consumer: the run resolves after the event in hand is committed. */
  signal?: AbortSignal | undefined;
}

export interface RunResult {
  /** Events handed to the handler (or to the triggers) and committed by this run. */
  processed: number;
}

/** How the consumer stands, for monitoring: what it has consumed and what went wrong last. */
export interface ConsumerStatus {
  cursor: number;
  /** The attempt this consumer claimed: its epoch on the server. */
  epoch: number;
  /** The last error fetching events, while it lasts; null once a fetch succeeds. */
  lastError: string | null;
  /** Emissions and cursor updates not yet delivered to the server. */
  pending: number;
}

/**
 * A consumer of one group: it reads events in cursor order, and applies each one's effect exactly once,
 * in one SQLite transaction with its cursor. Create it with `openConsumer`.
 */
export class Consumer {
  private readonly statements: ConsumerStatements;
  private readonly cursorCheckpoint: Checkpoint<number>;
  private readonly triggers: Trigger[] = [];
  private readonly assets: ReadonlySet<string>;
  /** The one asset consumed, which the server then filters on; undefined for several, filtered here. */
  private readonly onlyAsset: string | undefined;
  private running = false;
  private readonly fetchFailures: FailureStreak;
  /**
   * Where this consumer took its cursor from when it opened: its own file (`file`), the server's mirror
   * of the group's cursor because the file was new (`server`), or neither, at the first event (`start`).
   * A file of the group that another consumer has since moved past resumes from its own, older cursor:
   * it applies those events' effects again in its own file, and its cursor mirror moves the server's
   * copy back; see docs/consumers.md.
   */
  readonly resumedFrom: { source: 'file' | 'server' | 'start'; cursor: number };
  /** The cursor as close() found it: the file is closed after. */
  private cursorAtClose: number | undefined;

  /** @internal Use openConsumer. */
  constructor(
    private readonly box: Outbox,
    private readonly reader: ServerClient,
    private readonly options: ResolvedConsumerOptions,
  ) {
    this.statements = consumerStatements(box.file.db);
    this.cursorCheckpoint = box.checkpoint(CONSUMER_CURSOR_CHECKPOINT, z.number().int().min(0));
    // The group's assets, mirrored beside its cursor: the server counts the group's lag over them.
    const mirroredAssets = box.checkpoint(CONSUMER_ASSETS_CHECKPOINT, z.array(z.string()));
    const assets = [...new Set(options.assets)].sort();
    if (JSON.stringify(mirroredAssets.get()) !== JSON.stringify(assets)) box.commit((tx) => tx.set(mirroredAssets, assets));
    this.assets = new Set(options.assets);
    this.onlyAsset = this.assets.size === 1 ? options.assets[0] : undefined;
    this.fetchFailures = new FailureStreak(options.logger ?? defaultLogger(), { group: options.group });
    const cursor = this.cursor;
    this.resumedFrom = { source: box.resumedFrom !== undefined ? 'server' : cursor > 0 ? 'file' : 'start', cursor };
    // The file took its cursor from the server's mirror (the transaction that did wrote 'resumed'): its
    // triggers' state must be rebuilt up to that cursor. Planned here, before anything is consumed, so a
    // crash between the resume and this start still finds the cursor it resumed from.
    if (box.file.meta.read('resumed') !== undefined) this.statements.planRebuild.run({ upTo: this.cursor });
  }

  /** The consumer's SQLite file, for creating your tables before `run`; inside a handler use `tx.db`. */
  get db(): Database.Database {
    return this.box.file.db;
  }

  /** The attempt this consumer claimed from the server: its epoch. A later consumer of the group fences it. */
  get epoch(): number {
    return this.box.run!.attempt;
  }

  /** The cursor of the last event consumed (0 before the first); after close(), the one it closed at. */
  get cursor(): number {
    return this.cursorAtClose ?? this.cursorCheckpoint.get() ?? 0;
  }

  status(): ConsumerStatus {
    const outbox = this.box.status();
    return { cursor: this.cursor, epoch: this.epoch, lastError: this.fetchFailures.lastError, pending: outbox.pending + outbox.pendingCheckpoints };
  }

  /**
   * Registers a per-partition trigger: `handler` fires once per partition key, when every asset in
   * `when` has an event for it, inside the transaction that consumes the completing event. Register
   * triggers before `run`.
   */
  trigger(spec: TriggerSpec, handler: TriggerHandler): this {
    if (this.running) throw new OptionsError('trigger', 'consumer.trigger(): register triggers before run()');
    const trigger = new Trigger(spec, handler);
    const missing = trigger.when.filter((asset) => !this.assets.has(asset));
    if (missing.length > 0) {
      throw new OptionsError('when', `when: ${missing.map((a) => `"${a}"`).join(', ')} not among the consumer's assets; add them to openConsumer({ assets })`);
    }
    if (this.triggers.some((other) => other.name === trigger.name)) {
      throw new OptionsError('name', `name: a trigger named "${trigger.name}" is registered already; give each trigger its own name`);
    }
    this.triggers.push(trigger);
    return this;
  }

  /**
   * Delivers events in cursor order until `signal` aborts: one at a time to `handler`, or, with
   * `batch: true`, in batches of up to `batchSize` with one transaction per batch. Without a handler,
   * only the triggers run. Rejects with FencedError once a later consumer of the group has taken over,
   * and with the handler's own error (the event is then delivered again on the next run).
   */
  run(options?: ConsumeOptions): Promise<RunResult>;
  run(handler: EventHandler, options?: ConsumeOptions & { batch?: false }): Promise<RunResult>;
  run(handler: BatchHandler, options: ConsumeOptions & { batch: true }): Promise<RunResult>;
  async run(
    handlerOrOptions?: EventHandler | BatchHandler | ConsumeOptions,
    maybeOptions: ConsumeOptions & { batch?: boolean } = {},
  ): Promise<RunResult> {
    const handler = typeof handlerOrOptions === 'function' ? handlerOrOptions : undefined;
    const options: ConsumeOptions & { batch?: boolean } = typeof handlerOrOptions === 'function' ? maybeOptions : (handlerOrOptions ?? {});
    if (!handler && this.triggers.length === 0) {
      throw new OptionsError('handler', 'consumer.run(): give a handler, or register a trigger first');
    }
    if (this.running) throw new OptionsError('run', 'consumer.run(): this consumer is running already');
    this.running = true;
    const { signal } = options;
    let processed = 0;
    try {
      await this.catchUpTriggers(signal);
      while (!signal?.aborted) {
        this.assertCurrent();
        const page = await this.fetchRetrying(this.cursor, this.options.waitSeconds, signal);
        if (!page) break;
        const { events, next } = page;
        // Idle: nothing to deliver, so the relay would never hear of a later consumer's claim. Ask, so that
        // an idle zombie learns within one long-poll of it (the next turn's assertCurrent throws).
        if (events.length === 0) await this.box.learnFenceFromServer();
        const units = handler && options.batch ? [events] : events.map((event) => [event]);
        for (const unit of units) {
          // An abort stops after the event (or batch) in hand: the rest of the page waits for the next run.
          if (signal?.aborted) break;
          if (unit.length === 0) continue;
          processed += await this.consume(unit, handler, options.batch === true);
        }
        // Events of other assets after the last one of ours: the cursor moves past them too, unless an
        // abort left some of ours undelivered.
        if (next > this.cursor && !signal?.aborted) this.advanceCursor(next);
      }
    } catch (error) {
      // A fenced consumer's relay lets go of the file at once: on a shared file, the replacement's relay
      // takes the lease and delivers the rows the replacement took over.
      if (error instanceof FencedError) await this.box.relay?.stop();
      throw error;
    } finally {
      this.running = false;
    }
    return { processed };
  }

  /**
   * Waits (up to `timeoutMs`) for the emissions and cursor updates to be delivered, then closes the file.
   * Pending rows stay in the file for the next consumer on it.
   */
  close(options: { timeoutMs?: number } = {}): Promise<CloseResult> {
    // Read while the file is open; it cannot move once closing starts (the outbox takes no more commits).
    this.cursorAtClose ??= this.cursor;
    return this.box.close(options);
  }

  /** A page of this consumer's events after `after`; `next` is where the page ends, across other assets too. */
  private async fetch(after: number, waitS: number, signal?: AbortSignal): Promise<{ events: StoredEvent[]; next: number }> {
    const group = { producer: this.options.producer ?? this.options.group, group: this.options.group };
    const page = await this.reader.events({ asset: this.onlyAsset, after, limit: this.options.batchSize, waitS, group }, signal);
    return { events: page.events.filter((event) => this.assets.has(event.asset) && event.cursor > after), next: page.next };
  }

  /** Hands one unit (an event, or a batch) to the handler and commits it; returns how many events it took. */
  private async consume(unit: StoredEvent[], handler: EventHandler | BatchHandler | undefined, batch: boolean): Promise<number> {
    const last = unit.at(-1)!.cursor;
    // Delivered twice (a page fetched again after a lost answer): the first delivery's effect stands.
    const fresh = unit.filter((event) => this.statements.isConsumed.get({ eventId: event.eventId }) === undefined);
    if (fresh.length === 0) {
      this.advanceCursor(last);
      return 0;
    }
    let committed = false;
    const ctx: ConsumeContext = {
      commit: <R>(fn: (tx: ConsumeTransaction) => R): R => {
        if (committed) throw new OptionsError('ctx.commit', 'ctx.commit(): called twice for the same events; make all their writes in one commit');
        assertSyncCallback(fn, 'ctx.commit(fn)');
        committed = true;
        return this.commitUnit(fresh, last, fn);
      },
    };
    failpoint('consume:before-handler');
    if (handler) await (batch ? (handler as BatchHandler)(fresh, ctx) : (handler as EventHandler)(fresh[0]!, ctx));
    if (!committed) ctx.commit(() => undefined);
    failpoint('consume:after-commit');
    return fresh.length;
  }

  /** Moves the cursor past events that needed no handler (another asset's, or delivered before): a checkpoint-only commit, coalesced while undelivered. */
  private advanceCursor(to: number): void {
    this.box.commit((tx) => tx.set(this.cursorCheckpoint, to));
  }

  private commitUnit<R>(events: StoredEvent[], last: number, fn: (tx: ConsumeTransaction) => R): R {
    return this.box.commit((commit) => {
      const tx = new ConsumeTransaction(commit, this.box, events, null);
      let result: R;
      try {
        result = fn(tx);
      } finally {
        tx.end();
      }
      // Before the triggers run: nothing of a refused commit may happen.
      refusePromise(result);
      const now = Date.now();
      for (const event of events) {
        this.statements.markConsumed.run({ eventId: event.eventId, cursor: event.cursor, now });
        this.feedTriggers(event, commit, false);
      }
      commit.set(this.cursorCheckpoint, last);
      return result;
    });
  }

  private feedTriggers(event: StoredEvent, commit: CommitTransaction, replay: boolean): void {
    for (const trigger of this.triggers) trigger.feed(event, { statements: this.statements, commit, box: this.box, replay });
  }

  /**
   * A consumer that started on a fresh file resumed from the mirrored cursor, but its triggers' state
   * (which partitions have which assets, which fired) stayed on the old file. It is rebuilt from the
   * events up to that cursor, without firing: those firings were committed with the events that caused
   * them. Each page commits its part of the state with the rebuild's progress, so a rebuild stopped
   * part-way goes on from there at the next run.
   */
  private async catchUpTriggers(signal?: AbortSignal): Promise<void> {
    const plan = this.statements.rebuild.get();
    if (this.triggers.length === 0 || plan === undefined) return;
    let after = plan.done_through;
    while (after < plan.up_to) {
      const page = await this.fetchRetrying(after, 0, signal);
      if (!page) return;
      const ours = page.events.filter((event) => event.cursor <= plan.up_to);
      // An empty page past `after`: the events up to the cursor are gone (compacted); nothing more to rebuild.
      const through = page.next <= after ? plan.up_to : Math.min(page.next, plan.up_to);
      this.box.commit((commit) => {
        for (const event of ours) this.feedTriggers(event, commit, true);
        this.statements.advanceRebuild.run({ doneThrough: through });
      });
      after = through;
    }
  }

  /**
   * A page of events, fetched again with backoff while the server cannot be read (logged once per
   * cause); undefined once `signal` aborts.
   */
  private async fetchRetrying(after: number, waitS: number, signal?: AbortSignal): Promise<{ events: StoredEvent[]; next: number } | undefined> {
    for (let failures = 0; !signal?.aborted; failures++) {
      try {
        const page = await this.fetch(after, waitS, signal);
        this.recovered();
        return page;
      } catch (error) {
        if (signal?.aborted) break;
        // A refused token is refused again: the consumer stops at once, saying how to fix it.
        if (error instanceof CredentialsError) throw error;
        this.failed(error as Error);
        await sleep(Math.min(this.options.retryMaxDelayMs, 100 * 2 ** failures), undefined, { signal }).catch(() => undefined);
      }
    }
    return undefined;
  }

  /** Throws FencedError when a later consumer of the group claimed the epoch and this one learnt it. */
  private assertCurrent(): void {
    const run = this.box.run!;
    this.box.file.runs.assertCurrent(runKeyOf(run), run.attempt);
  }

  private failed(error: Error): void {
    this.fetchFailures.failed('consumer_fetch_failed', `oncebox consumer ${this.options.group}: cannot read events: ${error.message}; retrying`);
  }

  private recovered(): void {
    this.fetchFailures.recovered('consumer_fetch_recovered', `oncebox consumer ${this.options.group}: reading events again`);
  }
}

/**
 * Opens a consumer of one group: its SQLite file (created if missing), an epoch claimed from the server
 * (fencing any consumer of the group still running), and, on a fresh file, the cursor mirrored on the
 * server. Then call `run`.
 */
export async function openConsumer(options: ConsumerOptions): Promise<Consumer> {
  const given = resolveOptions(consumerOptionsSchema, options, 'openConsumer');
  const resolved = { ...given, token: given.token ?? tokenFromEnvironment() };
  const producer = resolved.producer ?? resolved.group;
  const outboxOptions = resolveOutboxOptions({
    path: resolved.path,
    server: resolved.server,
    token: resolved.token,
    producer,
    run: { workflow: CONSUMER_WORKFLOW, runId: resolved.group, attempt: 'claim' },
    durability: resolved.durability,
    requestTimeoutMs: resolved.requestTimeoutMs,
    resumeTimeoutMs: resolved.resumeTimeoutMs,
    resume: 'fresh-file',
    logger: resolved.logger,
    ...resolved.relay,
  });
  const box = await openResolvedOutbox(outboxOptions);
  const reader = new ServerClient({
    servers: outboxOptions.servers,
    token: resolved.readToken ?? resolved.token,
    requestTimeoutMs: resolved.requestTimeoutMs,
  });
  try {
    // The token may publish and claim, yet not read events: say so now, not at the first fetch.
    await reader.assertTokenAccepted({ events: { asset: resolved.assets.length === 1 ? resolved.assets[0] : undefined } }, Math.min(TOKEN_CHECK_MS, resolved.requestTimeoutMs));
  } catch (error) {
    await box.close({ timeoutMs: 0 });
    throw error;
  }
  return new Consumer(box, reader, resolved);
}

