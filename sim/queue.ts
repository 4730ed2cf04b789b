/**
 * A tenant's BullMQ queue in the simulated world: real worker processes of the BullMQ adapter
 * (test/support/bullmq-chaos-worker.ts) over the real Redis, publishing to the tenant's assets through
 * the world's network with the tenant's job token, while its hand-outs stall past their lock, throw, and
 * SIGKILL their process (a new worker process takes its place, on the same machine or a fresh one).
 * The tenant's consumers and trigger see its events beside those of its other jobs.
 */
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { planMischief, type Mischief } from '../test/support/bullmq-mischief.js';
import { redisAvailable, redisConnection, REDIS_URL } from '../test/support/redis.js';
import { seededRandom } from '../test/support/seeded-random.js';
import type { StoredEvent } from '../src/protocol/wire.js';
import { startProcess, type RunningProcess } from './processes.js';
import { Violation } from './violation.js';
import type { Tenant, World } from './world.js';

/** BullMQ's lock on a job: a stall longer than it lets another worker take the job over. */
const LOCK_MS = 1000;
const WORKERS = 2;
/** A job's tries in BullMQ: a doomed job throws on each and fails for good. */
const TRIES = 3;
let queues = 0;

/** One job of the queue: what it commits, its planned mischief, and how BullMQ ended it. */
export interface SimQueueJob {
  id: string;
  /** Its oncebox run: the job's id and its creation time, as the adapter names it. */
  runId: string;
  batches: number;
  chaos: Record<string, Mischief>;
  state?: 'completed' | 'failed';
}

/** A BullMQ queue of one tenant, run to its end in one operation of the simulation. */
export class SimQueue {
  readonly name = `oncebox-sim-${process.pid}-${Date.now().toString(36)}-${queues++}`;
  readonly jobs: SimQueueJob[] = [];
  /** Set when a restore took events from the server: the queue's events are then checked for order and duplicates only. */
  forgotten = false;
  private readonly workers: RunningProcess[] = [];
  private queue: Queue | undefined;

  constructor(
    private readonly world: World,
    readonly tenant: Tenant,
    private readonly seed: number,
  ) {}

  /** The producer the jobs publish as: the tenant's job producer, whose token the workers hold. */
  get producer(): string {
    return `${this.tenant.name}-job`;
  }

  /**
   * Adds two or three jobs, runs worker processes until BullMQ has ended every job, then waits until the
   * server shows each job's end (a success, or a failure for good), which its relay delivers after its
   * batches. Returns false where no Redis runs (outside CI only: test/support/redis.ts fails under CI).
   */
  async run(): Promise<boolean> {
    if (!redisAvailable) return false;
    const next = seededRandom(this.seed);
    const sameMachine = next() < 0.5;
    this.queue = new Queue(this.name, { connection: redisConnection });
    const count = 2 + Math.floor(next() * 2);
    for (let j = 0; j < count; j++) {
      const batches = 2 + Math.floor(next() * 3);
      this.jobs.push({ id: `${this.tenant.name}-bull-${j}`, runId: '', batches, chaos: planMischief(next, batches, [1500, 2500]) });
    }
    const added = await this.queue.addBulk(
      this.jobs.map((job) => ({ name: 'ingest', data: { batches: job.batches, batchMs: 50, chaos: job.chaos }, opts: { jobId: job.id, attempts: TRIES } })),
    );
    for (const [j, job] of added.entries()) this.jobs[j]!.runId = `${job.id}@${job.timestamp}`;
    const machine = mkdtempSync(join(this.world.dir, 'bullmq-'));
    let stopped = false;
    const start = () => {
      const child = startProcess(
        'test/support/bullmq-chaos-worker.ts',
        ['--queue', this.name, '--server', this.world.proxy.url, '--dir', sameMachine ? machine : mkdtempSync(join(this.world.dir, 'bullmq-')), '--redis', REDIS_URL.href, '--lock-ms', String(LOCK_MS), '--concurrency', '2', '--producer', this.producer, '--ready', this.tenant.assets.ready, '--done', this.tenant.assets.done],
        { ONCEBOX_TOKEN: this.tenant.tokens.job, ONCEBOX_FAILPOINT: '' },
      );
      this.workers.push(child);
      void child.done.then((outcome) => {
        if (outcome.signal === 'SIGKILL' && !stopped) {
          this.world.happened('BullMQ worker process killed mid-job');
          start();
        }
      });
    };
    try {
      for (let w = 0; w < WORKERS; w++) start();
      await this.settled();
      await this.endsDelivered();
    } finally {
      stopped = true;
      await Promise.all(this.workers.map((child) => child.stop('SIGKILL')));
    }
    for (const job of this.jobs) this.world.happened(`BullMQ job ${job.state}`);
    return true;
  }

  /** Waits until BullMQ has completed or failed every job for good, each state read from Redis. */
  private async settled(): Promise<void> {
    for (;;) {
      for (const job of this.jobs) {
        const state = await this.queue!.getJobState(job.id);
        if (state === 'completed' || state === 'failed') job.state = state;
      }
      if (this.jobs.every((job) => job.state !== undefined)) return;
      if (this.workers.every((child) => !child.running())) {
        throw new Violation('liveness', `${this.name}: every worker process exited with jobs unsettled: ${this.workers.map((child) => child.output()).join('\n').slice(-2000)}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /** Waits until the server holds every job's end; the stuck timer of the operation ends a wait that never would. */
  private async endsDelivered(): Promise<void> {
    const ends: StoredEvent[] = [];
    let after = 0;
    for (;;) {
      for (let page; (page = await this.world.server.store.listEvents({ assets: ['oncebox.run_succeeded', 'oncebox.run_failed'], after, limit: 1000 })).events.length > 0; ) {
        ends.push(...page.events.filter((event) => event.producer === this.producer));
        after = page.events.at(-1)!.cursor;
      }
      const ended = (job: SimQueueJob) =>
        ends.some((event) =>
          event.runId === job.runId &&
          (job.state === 'completed' ? event.asset === 'oncebox.run_succeeded' : event.asset === 'oncebox.run_failed' && (event.extra as { willRetry?: boolean }).willRetry === false),
        );
      if (this.jobs.every(ended)) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /** The events of a job's run in `history`, by asset. */
  eventsOf(job: SimQueueJob, history: readonly StoredEvent[], asset: string): StoredEvent[] {
    return history.filter((event) => event.producer === this.producer && event.runId === job.runId && event.asset === asset);
  }

  /** The partition keys a job's batches are published under, in commit order. */
  static partitions(job: SimQueueJob): string[] {
    return Array.from({ length: job.batches }, (_, i) => `${job.id}/batch-${i + 1}`);
  }

  async close(): Promise<void> {
    for (const child of this.workers) child.signal('SIGKILL');
    if (this.queue === undefined) return;
    await this.queue.obliterate({ force: true }).catch(() => undefined);
    await this.queue.close();
  }
}
