import { isLifecycleAsset, type LifecycleExtra } from '../src/protocol/lifecycle.js';
import type { AssetSummary, ConsumerGroup, Page, Rejection, StreamSummary } from '../src/protocol/catalog.js';
import type { EventPage, StoredEvent } from '../src/protocol/wire.js';
import type { SimGroup } from './groups.js';
import type { SimTask } from './jobs.js';
import { SimQueue } from './queue.js';
import { partitionDateOf, RUN_ID } from './batch.js';
import { PRY_RUN, withoutPryRefusals } from './prying.js';
import { expect } from './violation.js';
import { STALE_RUN_AFTER_MS, type Tenant, type World } from './world.js';

/** The catalog's lists as one tenant's reader sees them. */
interface CatalogPages {
  assets: Page<AssetSummary>;
  streams: Page<StreamSummary>;
  consumers: Page<ConsumerGroup>;
  rejections: Page<Rejection>;
}


const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** The batch an event of a task's batch is about: its partition key is `<task>.<batch>`. */
const batchOf = (event: StoredEvent) => Number(event.partitionKey!.split('.')[1]);

/**
 * One checker for the guarantees the simulation exercises, over what the server answered, never over
 * its internals: every event the server ever showed (read after every step, so that what retention
 * removed later still counts), the catalog as each tenant's reader sees it, and every answer that passed
 * through the network. `final` holds the run to its whole backlog once everything has drained.
 */
export class Checker {
  /** Every event the server showed, by cursor: the history, kept across compaction. */
  private readonly history = new Map<number, StoredEvent>();

  constructor(
    private readonly world: World,
    private readonly tasks: readonly SimTask[],
    private readonly groups: readonly SimGroup[],
    /** The BullMQ queues run so far: the simulation adds each as it runs it. */
    private readonly queues: readonly SimQueue[],
  ) {}

  /**
   * The server was restored from a backup whose newest event is at `cursor`: what came after it is gone
   * from the server, and its cursors are handed out again. The history goes back with it; the checks
   * go on from there (the documented fix republishes what the backup lost).
   */
  forgetAfter(cursor: number): void {
    for (const key of [...this.history.keys()]) if (key > cursor) this.history.delete(key);
    // A queue's jobs are not run again: what the backup lost of them stays lost.
    for (const queue of this.queues) queue.forgotten = true;
  }

  /** The newest cursor the server has shown (0 before any event). */
  get newestCursor(): number {
    return Math.max(0, ...this.history.keys());
  }

  /** Every event the server has shown, by cursor (what compaction removed too). */
  get seen(): StoredEvent[] {
    return [...this.history.values()].sort((a, b) => a.cursor - b.cursor);
  }

  /** How many events the server has shown in all. */
  get eventsSeen(): number {
    return this.history.size;
  }

  async check(options: { final?: boolean } = {}): Promise<void> {
    const { stored, catalogs } = await this.quietRead();
    for (const event of stored) this.history.set(event.cursor, event);
    const history = [...this.history.values()].sort((a, b) => a.cursor - b.cursor);
    this.noServerErrors();
    for (const task of this.tasks) {
      this.checkTask(task, history, options.final === true);
      this.checkStream(task, history, catalogs.get(task.tenant.name)!.streams, options.final === true);
    }
    for (const group of this.groups) this.checkGroup(group, history, options.final === true);
    for (const queue of this.queues) this.checkQueue(queue, history, catalogs.get(queue.tenant.name)!.streams);
    this.checkCatalogs(stored, catalogs);
    if (options.final) await this.checkStoredTokens();
  }

  /** G17: the store keeps no token as it is: a copy of its tokens table lets nobody in. */
  private async checkStoredTokens(): Promise<void> {
    const rows = JSON.stringify(await this.world.storedTokenRows());
    const secrets = [this.world.admin, ...this.world.tenants.flatMap((tenant) => Object.values(tenant.tokens))].map((token) => token.slice(-43));
    expect('G17', secrets.every((secret) => !rows.includes(secret)), () => 'the server stores a token\'s secret as it is: a copy of its tokens table is a key');
  }

  /**
   * The stored events and each tenant's catalog, read at a moment when no event arrived between the two
   * (consumers' relays deliver in the background): the catalog is compared with the events of that moment.
   */
  private async quietRead(): Promise<{ stored: StoredEvent[]; catalogs: Map<string, CatalogPages> }> {
    for (let tries = 1; ; tries++) {
      const stored = await this.storedEvents();
      const catalogs = new Map<string, CatalogPages>();
      for (const tenant of this.world.tenants) catalogs.set(tenant.name, await this.catalogOf(tenant));
      const after = await this.storedEvents();
      if (after.length === stored.length && after.at(-1)?.cursor === stored.at(-1)?.cursor) return { stored, catalogs };
      expect('liveness', tries < 200, () => 'events kept arriving for 200 reads of the catalog');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  private async catalogOf(tenant: Tenant): Promise<CatalogPages> {
    return {
      assets: await this.catalog<Page<AssetSummary>>('/v1/catalog/assets?limit=200', tenant.tokens.reader),
      streams: await this.catalog<Page<StreamSummary>>('/v1/catalog/streams?limit=200', tenant.tokens.reader),
      consumers: await this.catalog<Page<ConsumerGroup>>('/v1/catalog/consumers?limit=50', tenant.tokens.reader),
      rejections: await this.catalog<Page<Rejection>>('/v1/catalog/rejections?limit=200', tenant.tokens.reader),
    };
  }

  /** G19 and the protocol's promise: no answer of the server is a 5xx, whatever was sent to it. */
  private noServerErrors(): void {
    const failed = this.world.answers.filter((answer) => answer.status >= 500);
    expect('no 5xx', failed.length === 0, () => `the server answered ${JSON.stringify(failed.slice(0, 3))}`);
  }

  /**
   * G3, G10, G12, G25: a task's events are its backlog, each once and in commit order, from attempts
   * that never go down; one failure or fence notice per attempt and one success at most, each naming an
   * attempt up to the one that delivered it; the held emissions each released once at most.
   */
  private checkTask(task: SimTask, history: readonly StoredEvent[], final: boolean): void {
    const label = `${task.tenant.name}/${task.name}`;
    const own = history.filter((event) => event.producer === task.producer && event.runId === RUN_ID && event.task === task.name);
    // G3: a task's `ready` events are its batches, each once, in commit order; a batch may be missing
    // only if some attempt misspelt its asset. A misspelt batch is on the misspelt asset once (G18): an
    // attempt that redid a batch another attempt had published (a file behind the server) misspelt it
    // anew, under another asset, so it may be on both.
    const ready = own.filter((event) => event.asset === task.tenant.assets.ready);
    const batches = ready.map(batchOf);
    const typo = own.filter((event) => event.asset === task.tenant.assets.typo).map(batchOf);
    const inOrder = batches.every((batch, i) => i === 0 || batch > batches[i - 1]!);
    const misdated = ready.filter((event) => event.partitionDate === null || Date.parse(event.partitionDate) !== Date.parse(partitionDateOf(batchOf(event))));
    expect('G3', misdated.length === 0, () => `${label}: events stored with another partition date than committed: ${JSON.stringify(misdated.map((event) => [event.partitionKey, event.partitionDate]))}`);
    const gaps = Array.from({ length: Math.max(0, ...batches) }, (_, i) => i + 1).filter((batch) => !batches.includes(batch) && !task.typos.includes(batch));
    expect('G3', inOrder && gaps.length === 0, () => `${label}: ready events of batches ${JSON.stringify(batches)}, want each batch once, in commit order (misspelt: ${JSON.stringify(task.typos)})`);
    if (final && task.outcome === 'complete') {
      const missing = Array.from({ length: task.completedBatch }, (_, i) => i + 1).filter((batch) => !batches.includes(batch) && !typo.includes(batch));
      expect('G3', missing.length === 0, () => `${label}: completed at batch ${task.completedBatch}, yet batches ${JSON.stringify(missing)} were never published`);
    }
    const attempts = own.filter((event) => event.asset === task.tenant.assets.ready || event.asset === task.tenant.assets.typo).map((event) => event.attempt);
    expect('G10', same(attempts, [...attempts].sort((a, b) => a - b)), () => `${label}: attempts of its events went down: ${JSON.stringify(attempts)}`);
    expect('G18', new Set(typo).size === typo.length && typo.every((batch) => task.typos.includes(batch)), () => `${label}: the misspelt asset holds batches ${JSON.stringify(typo)}, want each of ${JSON.stringify(task.typos)} once at most`);
    const done = own.filter((event) => event.asset === task.tenant.assets.done).map(batchOf);
    expect('G25', new Set(done).size === done.length, () => `${label}: a held emission released twice: ${JSON.stringify(done)}`);
    // Released in one commit, several to a request, in the order they were held: batch after batch (G3).
    expect('G3', same(done, [...done].sort((a, b) => a - b)), () => `${label}: held emissions released in one commit, stored in the order ${JSON.stringify(done)}`);
    const succeeded = task.outcome !== 'fail for good';
    if (!succeeded) expect('G25', done.length === 0, () => `${label}: the run failed for good, yet held emissions were released: ${JSON.stringify(done)}`);
    if (final && succeeded) {
      const all = Array.from({ length: task.completedBatch }, (_, i) => i + 1);
      expect('G25', same([...done].sort((a, b) => a - b), all), () => `${label}: held emissions released ${JSON.stringify(done)}, want each of ${JSON.stringify(all)} once`);
    }
    const notices = own.filter((event) => isLifecycleAsset(event.asset));
    const about = notices.filter((event) => event.asset !== 'oncebox.run_succeeded').map((event) => (event.extra as unknown as LifecycleExtra).attempt!);
    expect('G25', new Set(about).size === about.length, () => `${label}: two failure or fence notices of one attempt: ${JSON.stringify(about)}`);
    const successes = notices.filter((event) => event.asset === 'oncebox.run_succeeded').length;
    expect('G25', final && succeeded ? successes === 1 : successes <= (succeeded ? 1 : 0), () => `${label}: ${successes} success notices; its events: ${JSON.stringify(own.map((event) => [event.asset, event.partitionKey, event.attempt, event.seq]))}; pending in its file: ${task.current.crashed ? "(closed)" : task.current.box.file.pendingCount()}`);
    if (final) {
      // The file the task ended on was delivered to the end: every failure recorded in it reached the
      // server, delivered by its own attempt or by a later one that took it over (G12).
      for (const failure of task.failures.filter((f) => f.path === task.current.path)) {
        const found = notices.filter((event) => event.asset === 'oncebox.run_failed' && (event.extra as unknown as LifecycleExtra).attempt === failure.attempt).length;
        expect('G25', found === 1, () => `${label}: attempt ${failure.attempt} failed on the file the task ended on, and ${found} failure notices of it were stored`);
      }
    }
    for (const event of notices) {
      const named = (event.extra as unknown as LifecycleExtra).attempt;
      expect('G25', named === undefined || named <= event.attempt, () => `${label}: a notice of attempt ${named} delivered by attempt ${event.attempt}`);
    }
  }

  /**
   * G11 and G27: the server's copy of a task's checkpoint is never ahead of its events (a retry on a fresh
   * machine resumes from it), and the catalog tells the run's outcome as the task ended it.
   */
  private checkStream(task: SimTask, history: readonly StoredEvent[], streams: Page<StreamSummary>, final: boolean): void {
    const label = `${task.tenant.name}/${task.name}`;
    const stream = streams.items.find((item) => item.producer === task.producer && item.runId === RUN_ID && item.task === task.name);
    if (stream === undefined) return;
    const seen = new Set(
      history
        .filter((event) => event.producer === task.producer && event.runId === RUN_ID && event.task === task.name && (event.asset === task.tenant.assets.ready || event.asset === task.tenant.assets.typo))
        .map(batchOf),
    );
    let published = 0;
    while (seen.has(published + 1)) published++;
    const copy = (stream.checkpoints['progress'] as { batch: number } | undefined)?.batch ?? 0;
    expect('G11', copy <= published, () => `${label}: the server's checkpoint copy is at batch ${copy}, but only ${published} batches were published`);
    if (final) {
      // A run without an end is stale once it has made no request for the stale time on the server's
      // clock, which the simulation moves by days (compaction): running before, stale after.
      const idle = this.world.clock - Date.parse(stream.lastDeliveryAt) >= STALE_RUN_AFTER_MS;
      const outcome = task.outcome === 'complete' ? 'succeeded' : task.outcome === 'fail for good' ? 'failed' : idle ? 'stale' : 'running';
      expect('G27', stream.outcome === outcome, () => `${label}: the catalog says the run is ${stream.outcome}, the task ended ${task.outcome ?? 'never'}`);
    }
  }

  /**
   * G3, G25 and G27 for the jobs of a BullMQ queue, as BullMQ ended them: each batch once, in commit
   * order, all of them for a completed job; the held emissions released once, and only for a completed
   * job; one success, or one failure for good with every earlier failure saying a retry was coming; the
   * catalog telling the run's outcome as BullMQ's state. After a restore from an older backup, only what
   * a lost event cannot excuse (a duplicate, an order, a release of a failed job's emissions).
   */
  private checkQueue(queue: SimQueue, history: readonly StoredEvent[], streams: Page<StreamSummary>): void {
    for (const job of queue.jobs) {
      if (job.state === undefined) continue;
      const label = `${queue.tenant.name}'s BullMQ job ${job.id} (${job.state}; planned mischief ${JSON.stringify(job.chaos)})`;
      const want = SimQueue.partitions(job);
      const partitions = (asset: string) => queue.eventsOf(job, history, asset).map((event) => event.partitionKey);
      const ready = partitions(queue.tenant.assets.ready);
      const done = partitions(queue.tenant.assets.done);
      const successes = queue.eventsOf(job, history, 'oncebox.run_succeeded').length;
      const failures = queue.eventsOf(job, history, 'oncebox.run_failed').map((event) => (event.extra as unknown as LifecycleExtra).willRetry);
      const whole = !queue.forgotten;
      expect('G3', whole && job.state === 'completed' ? same(ready, want) : same(ready, want.slice(0, ready.length)), () => `${label}: batches published ${JSON.stringify(ready)}, want ${JSON.stringify(want)} once each, in order${job.state === 'completed' ? '' : ' (a prefix of them)'}`);
      expect('G25', new Set(done).size === done.length, () => `${label}: a held emission released twice: ${JSON.stringify(done)}`);
      if (job.state === 'completed') {
        if (whole) expect('G25', same([...done].sort(), [...want].sort()), () => `${label}: held emissions released ${JSON.stringify(done)}, want each of ${JSON.stringify(want)} once`);
        expect('G25', whole ? successes === 1 : successes <= 1, () => `${label}: ${successes} success notices`);
        expect('G25', failures.every((willRetry) => willRetry === true), () => `${label}: completed, yet a failure said no retry was coming: ${JSON.stringify(failures)}`);
      } else {
        expect('G25', done.length === 0 && successes === 0, () => `${label}: failed for good, yet ${successes} successes and held emissions released: ${JSON.stringify(done)}`);
        const final = failures.filter((willRetry) => willRetry !== true).length;
        expect('G25', whole ? final === 1 && failures.at(-1) === false : final <= 1, () => `${label}: failures ${JSON.stringify(failures)} (willRetry of each), want one failure for good, the last`);
      }
      const stream = streams.items.find((item) => item.producer === queue.producer && item.runId === job.runId);
      const outcome = job.state === 'completed' ? 'succeeded' : 'failed';
      if (whole && stream !== undefined) expect('G27', stream.outcome === outcome, () => `${label}: the catalog says the run is ${stream.outcome}, BullMQ ended it ${job.state}`);
    }
  }

  /** G20 for a summariser, G22 for a closer (a per-partition trigger). */
  private checkGroup(group: SimGroup, history: readonly StoredEvent[], final: boolean): void {
    if (group.kind === 'summariser') this.checkSummariser(group, history, final);
    else this.checkCloser(group, history, final);
  }

  /** G20: each event's effect applied once where it is kept, and its caused emission on the server once. */
  private checkSummariser(group: SimGroup, history: readonly StoredEvent[], final: boolean): void {
    const label = group.name;
    for (const [eventId, times] of group.effects()) expect('G20', times === 1, () => `${label}: the effect of ${eventId} applied ${times} times`);
    const causes = history.filter((event) => event.producer === group.name && event.asset === group.output).map((event) => event.causedBy);
    expect('G20', new Set(causes).size === causes.length, () => `${label}: an event caused two summaries`);
    if (final) {
      const inputs = history.filter((event) => event.asset === group.tenant.assets.ready).map((event) => event.eventId);
      expect('G20', same([...causes].sort(), [...inputs].sort()), () => `${label}: summaries caused by ${causes.length} events, want one for each of ${inputs.length}`);
    }
  }

  /**
   * G22: a closer fires only for a partition that has both a `ready` and a `done` event; once per
   * partition when it ignores newer events, and once more for each newer event when it refreshes, each
   * firing numbered in turn; once everything has drained, for every such partition (unless compaction
   * removed events a rebuild on a fresh file needed: the guarantee's assumption). What each of its files
   * recorded shows its handler ran once per firing, and never for an event a rebuild replayed.
   */
  private checkCloser(group: SimGroup, history: readonly StoredEvent[], final: boolean): void {
    const label = group.name;
    const firings = history.filter((event) => event.producer === group.name && event.asset === group.output);
    const fired = firings.map((event) => event.partitionKey!);
    const listed = (partition: string) => history.filter((event) => event.partitionKey === partition && group.assets.includes(event.asset));
    const partitionsOf = (asset: string) => new Set(history.filter((event) => event.asset === asset).map((event) => event.partitionKey!));
    const ready = partitionsOf(group.tenant.assets.ready);
    const done = partitionsOf(group.tenant.assets.done);
    const complete = [...ready].filter((partition) => done.has(partition));
    const early = fired.filter((partition) => !ready.has(partition) || !done.has(partition));
    expect('G22', early.length === 0, () => `${label}: fired for ${JSON.stringify(early)}, which lack an event of a listed asset`);
    if (group.tenant.closerOnNewer === 'ignore') {
      // A rebuild without the compacted events may not know a partition fired (the guarantee's assumption).
      if (!group.rebuiltWithoutHistory) expect('G22', new Set(fired).size === fired.length, () => `${label}: fired twice for a partition: ${JSON.stringify(fired)}`);
      if (final && !group.rebuiltWithoutHistory) {
        const missing = complete.filter((partition) => !fired.includes(partition));
        expect('G22', missing.length === 0, () => `${label}: never fired for ${JSON.stringify(missing)}, which have every listed asset`);
      }
    } else if (!group.rebuiltWithoutHistory) {
      // A rebuild without the compacted events counts a partition's firings from what it still sees.
      for (const partition of new Set(fired)) {
        const numbers = firings.filter((event) => event.partitionKey === partition).map((event) => (event.extra as { firing?: number }).firing ?? 0);
        expect('G22', same([...numbers].sort((a, b) => a - b), numbers.map((_, i) => i + 1)), () => `${label}: partition ${partition} fired as firings ${JSON.stringify(numbers)}, want 1, 2, … once each`);
      }
      if (final) {
        for (const partition of complete) {
          // It fires when the last listed asset arrives, and again for each event of a listed asset after.
          const events = listed(partition);
          const completing = events.findIndex((_, i) => group.assets.every((asset) => events.slice(0, i + 1).some((event) => event.asset === asset)));
          const want = events.length - completing;
          const got = fired.filter((key) => key === partition).length;
          expect('G22', got === want, () => `${label}: partition ${partition} fired ${got} times, want ${want} (its first firing and a refresh for each of its ${want - 1} newer events)`);
        }
      }
    }
    for (const file of group.firings()) {
      const replayed = file.firings.filter((firing) => firing.cursor <= file.replayedTo);
      expect('G22', replayed.length === 0, () => `${label}: its handler ran for events a rebuild replays (the group's cursor was ${file.replayedTo} when ${file.path} was first opened): ${JSON.stringify(replayed.slice(0, 3))}`);
      const runs = file.firings.map((firing) => `${firing.partitionKey}#${firing.firing}`);
      expect('G22', new Set(runs).size === runs.length, () => `${label}: a firing's handler committed twice in ${file.path}: ${JSON.stringify(runs)}`);
    }
  }

  /**
   * G17 and G27: each tenant's reader sees nothing of another tenant, and its counts are a recount of
   * what the server stores: each asset's events, each consumer group's lag; the only refusals are those the
   * simulation's mistakes asked for (the misspelt asset, an attempt far above the run's, a prying tenant's).
   */
  private checkCatalogs(stored: readonly StoredEvent[], catalogs: Map<string, CatalogPages>): void {
    const others = (name: string) => this.world.tenants.filter((tenant) => tenant.name !== name).map((tenant) => tenant.name);
    for (const tenant of this.world.tenants) {
      const pages = catalogs.get(tenant.name)!;
      // A prying tenant's own refusals name the other tenant's asset it sent: its own words, not a leak.
      const text = withoutPryRefusals(JSON.stringify(pages));
      for (const other of others(tenant.name)) {
        expect('G17', !text.includes(`${other}.`) && !text.includes(`${other}-`), () => `${tenant.name}'s reader was shown something of ${other}: ${text.slice(Math.max(0, text.search(new RegExp(`${other}[.-]`)) - 300), text.search(new RegExp(`${other}[.-]`)) + 100)}`);
      }
      for (const asset of pages.assets.items) {
        const events = stored.filter((event) => event.asset === asset.name);
        expect('G27', asset.events === events.length, () => `${tenant.name}'s reader: ${asset.name} counted ${asset.events} events, a recount finds ${events.length}`);
        const partitions = new Set(events.filter((event) => event.partitionKey !== null).map((event) => event.partitionKey)).size;
        expect('G27', asset.partitions === partitions, () => `${tenant.name}'s reader: ${asset.name} counted ${asset.partitions} partitions, a recount finds ${partitions}`);
      }
      for (const group of pages.consumers.items) {
        const recount = stored.filter((event) => (group.assets ?? []).includes(event.asset) && event.cursor > group.cursor).length;
        expect('G27', group.lag === recount, () => `${tenant.name}'s reader: ${group.group}'s lag ${group.lag}, a recount finds ${recount}`);
      }
      const unexpected = pages.rejections.items.filter(
        (rejection) =>
          !(rejection.code === 'unknown_asset' && rejection.asset === tenant.assets.typo) &&
          rejection.runId !== PRY_RUN &&
          !this.world.expectedRefusals.has(`${rejection.producer} ${rejection.code}`),
      );
      expect('G19', unexpected.length === 0, () => `${tenant.name}: refused ${JSON.stringify(unexpected.slice(0, 2))}`);
    }
  }

  private async catalog<T>(path: string, token: string): Promise<T> {
    const response = await this.get(path, token);
    expect('no 5xx', response.status < 500, () => `GET ${path} answered ${response.status}`);
    expect('G17', response.status === 200, () => `GET ${path} answered ${response.status} to a reader of its own`);
    return (await response.json()) as T;
  }

  private get(path: string, token: string): Promise<Response> {
    return this.world.fetch(path, { headers: { authorization: `Bearer ${token}` } });
  }

  /** Every event the server stores now, paged as a reader pages. */
  private async storedEvents(): Promise<StoredEvent[]> {
    const events: StoredEvent[] = [];
    let after = 0;
    for (;;) {
      const response = await this.get(`/v1/events?after=${after}&limit=1000`, this.world.admin);
      expect('no 5xx', response.status < 500, () => `GET /v1/events answered ${response.status}`);
      const page = (await response.json()) as EventPage;
      events.push(...page.events);
      if (page.events.length === 0) return events;
      after = page.next;
    }
  }
}
