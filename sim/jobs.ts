import { DeliveryError, ServerClient } from '../src/client/server-client.js';
import { DeadLetters } from '../src/outbox/file/dead-letters.js';
import { CredentialsError, FencedError, openOutbox, RunEndedError, type AttemptSource, type Outbox } from '../src/outbox/index.js';
import { Relay } from '../src/outbox/relay/relay.js';
import type { Fault } from '../src/testing/fault-proxy.js';
import type { Page, StreamSummary } from '../src/protocol/catalog.js';
import { announceAgain, commitBatch, commitSeen, lastBatch, RUN_ID, setProgress, type BatchOptions, type CommittedBatch } from './batch.js';
import type { JobProcessArgs } from './job-process.js';
import { runSimProcess, startOncebox, startSimProcess, type ProcessOutcome, type RunningProcess } from './processes.js';
import { until } from './waiting.js';
import { startIdleCloser } from './idle-closer.js';
import { expect } from './violation.js';
import { QUIET_LOGGER, type Tenant, type World } from './world.js';

const LEASE_TTL_MS = 1000;

/** The failpoints a job process is killed at: before a commit, inside it, after it, and after the server stored a delivery. */
export type JobKillPoint = 'commit:before' | 'commit:after-write' | 'commit:after-commit' | 'relay:after-response';

/** Where a full disk fails a job process's write: inside a commit's transaction, or as the relay records the server's answers. */
export type DiskFullPoint = 'commit:after-write' | 'relay:after-response';

/** Where a retry runs: the machine of the attempt before, a fresh one, or the task's first machine (its file perhaps shared, perhaps behind). */
export type Machine = 'same' | 'fresh' | 'first';

/** How an attempt ends on purpose. */
export type Ending = 'complete' | 'fail with a retry' | 'fail for good';

/** One process of a task: an attempt with its outbox file and its own relay, driven step by step. */
export interface Attempt {
  box: Outbox;
  relay: Relay;
  attempt: number;
  path: string;
  /** Its file is closed: the process is gone. */
  crashed: boolean;
  /** It was told it is fenced (by a commit or by its relay): a job stops then. */
  fenced: boolean;
  /** Its terminal commit is made: it commits nothing more. */
  ended: boolean;
  /** The token it was started with: its tenant's job token, unless a user's mistake gave it another. */
  token: string;
}

/**
 * One task of a tenant's run, as a job runner runs it: an attempt at a time, retried on the same machine
 * or on a fresh one, sometimes with an earlier attempt still running beside it (a zombie). Its batch b
 * emits one event now (`<task>.<b>` on the tenant's `ready`) and one held for the run's success (the
 * same partition on `done`), and sets its checkpoint to b, in one commit.
 */
export class SimTask {
  current!: Attempt;
  zombie: Attempt | undefined;
  /** The furthest batch any attempt committed. */
  furthest = 0;
  /** Batches whose `ready` event went to the misspelt asset. */
  readonly typos: number[] = [];
  /** The last batch of the attempt that completed the task: every batch up to it must be published. */
  completedBatch = 0;
  /** The attempts that failed, and the file each failed on: its notice is delivered once that file is. */
  readonly failures: { attempt: number; path: string }[] = [];
  /** How the current attempt ended, if it did: a runner retries only an attempt that failed with a retry. */
  outcome: Ending | undefined;
  /** A new version of the job runs now, which keeps its checkpoint in another shape (see changeSchemaAndFix). */
  newShape = false;

  constructor(
    private readonly world: World,
    readonly tenant: Tenant,
    readonly name: string,
    /** The file of its first attempt: shared with the run's other task, or its own. */
    private firstPath: string,
    /** When a retry takes the server's checkpoints: the default, or as the BullMQ adapter opens its files. */
    private readonly resume: 'fresh-file' | 'server-newer',
    /** Rows a request of its relays holds. */
    private readonly batchRows = 3,
  ) {}

  get producer(): string {
    return `${this.tenant.name}-job`;
  }

  async start(): Promise<void> {
    this.current = await this.open(this.firstPath, 1);
  }

  latestAttempt(): number {
    return Math.max(this.current.attempt, this.zombie?.attempt ?? 0);
  }

  /** A job process of this task: its outbox (resuming from the server when the file is fresh), and its relay. */
  async open(path: string, attempt: number | 'claim' | AttemptSource, token = this.tenant.tokens.job, relay: 'manual' | 'in-process' = 'manual'): Promise<Attempt> {
    const box = await openOutbox({
      path,
      server: this.world.proxy.url,
      token,
      relay,
      batchMaxRows: this.batchRows,
      retryMinDelayMs: 1,
      retryMaxDelayMs: 5,
      leaseTtlMs: LEASE_TTL_MS,
      producer: this.producer,
      run: { workflow: 'sim', runId: RUN_ID, task: this.name, attempt },
      durability: 'normal',
      now: () => this.world.clock,
      noteFenced: true,
      resume: this.resume,
      logger: QUIET_LOGGER,
    });
    return { box, relay: this.newRelay(box, token), attempt: box.run!.attempt, path, crashed: false, fenced: false, ended: false, token };
  }

  newRelay(box: Outbox, token: string): Relay {
    return new Relay(box.file, {
      client: new ServerClient({ servers: [this.world.proxy.url], token, requestTimeoutMs: 5000 }),
      // Two or three rows a request (a batch's commit cut in two, or two events in one request), four
      // requests in flight: a step with several batches waiting pipelines them, so that a fault on one
      // request leaves a gap before the next.
      batchMaxRows: this.batchRows,
      maxInFlight: 4,
      batchMaxBytes: 1 << 20,
      retryMinDelayMs: 1,
      retryMaxDelayMs: 5,
      leaseTtlMs: LEASE_TTL_MS,
      now: () => this.world.clock,
    });
  }

  /** The last batch `attempt`'s checkpoint records. */
  batch(attempt: Attempt): number {
    return lastBatch(attempt.box);
  }

  /** The next batch of `attempt`: its data written (nothing to do here), then checkpoint and emissions in one commit. */
  commit(attempt: Attempt | undefined, options: BatchOptions = {}): CommittedBatch | undefined {
    if (!live(attempt)) return undefined;
    let committed: CommittedBatch;
    try {
      committed = commitBatch(attempt.box, this.tenant.assets, this.name, { newShape: this.newShape, sharedPartitions: this.tenant.sharedPartitions, ...options });
    } catch (error) {
      if (this.stopped(attempt, error)) return undefined;
      throw error;
    }
    if (options.typo && !this.typos.includes(committed.batch)) this.typos.push(committed.batch);
    this.furthest = Math.max(this.furthest, committed.batch);
    return committed;
  }

  /**
   * docs/runbook.md, "Publish partitions again": the current attempt sets its checkpoint back to before
   * `from`, in a commit, and does the batches from there again (under the right asset now). Only when
   * `from` is its last batch: batches after it, published before, would be stored ahead of it.
   * @returns whether it did.
   */
  async publishAgain(from: number): Promise<boolean> {
    const attempt = this.current;
    if (!live(attempt) || attempt.ended || this.batch(attempt) !== from) return false;
    try {
      setProgress(attempt.box, from - 1, this.newShape);
    } catch (error) {
      if (this.stopped(attempt, error)) return false;
      throw error;
    }
    return this.commit(attempt) !== undefined;
  }

  /** `attempt` announces its last batch again (see announceAgain); false when it has none or may not commit. */
  announceAgain(attempt: Attempt | undefined, options: { typo?: boolean } = {}): boolean {
    const batch = live(attempt) ? this.batch(attempt) : 0;
    if (!live(attempt) || batch === 0) return false;
    try {
      announceAgain(attempt.box, this.tenant.assets, this.name, batch, { ...options, sharedPartitions: this.tenant.sharedPartitions });
      if (options.typo && !this.typos.includes(batch)) this.typos.push(batch);
      return true;
    } catch (error) {
      if (this.stopped(attempt, error)) return false;
      throw error;
    }
  }

  /** A checkpoint-only commit of `attempt` (see commitSeen); false when the attempt may not commit. */
  commitSeen(attempt: Attempt | undefined): boolean {
    if (!live(attempt)) return false;
    try {
      commitSeen(attempt.box, attempt.attempt);
      return true;
    } catch (error) {
      if (this.stopped(attempt, error)) return false;
      throw error;
    }
  }

  /**
   * The attempt ends: its success, or its failure with or without a retry to come. A job completes
   * only after its work: an attempt that resumed behind the furthest batch (a fresh machine, an
   * unacknowledged checkpoint) commits the batches up to it first. `twice`: the job's handler and its
   * runner's both end it (a failure callback run twice), and the second call records nothing (G25).
   */
  end(attempt: Attempt, how: Ending, twice = false): void {
    if (!live(attempt) || attempt.ended) return;
    if (how === 'complete') {
      while (this.batch(attempt) < this.furthest) if (this.commit(attempt) === undefined) return;
    }
    const endIt = () => (how === 'complete' ? attempt.box.complete() : attempt.box.fail(new Error(`attempt ${attempt.attempt} failed`), undefined, { willRetry: how === 'fail with a retry' }));
    try {
      endIt();
    } catch (error) {
      if (this.stopped(attempt, error)) return;
      throw error;
    }
    if (twice) {
      // As documented: called again in the same attempt, it does nothing.
      const again = (() => {
        try {
          return endIt();
        } catch (error) {
          return error;
        }
      })();
      expect('G25', 'recorded' in (again as object) && !(again as { recorded: boolean }).recorded, () => `${this.tenant.name}/${this.name}: attempt ${attempt.attempt} ended a second time (${how}): ${again instanceof Error ? `it threw ${again.message}` : 'its end was recorded again'}`);
      this.world.happened('an attempt ended twice, recorded once');
    }
    attempt.ended = true;
    this.outcome = how;
    if (how !== 'complete') this.failures.push({ attempt: attempt.attempt, path: attempt.path });
    if (how === 'complete') this.completedBatch = this.batch(attempt);
  }

  /** The run is over for this task: it succeeded, or failed for good. */
  get over(): boolean {
    return this.outcome === 'complete' || this.outcome === 'fail for good';
  }

  /**
   * One delivery attempt of `attempt`'s relay through the proxy with `fault`; failures are the point. A
   * refused token comes back (a job stops on it); any other error that is not a failed request is a bug.
   */
  async step(attempt: Attempt, fault: Fault): Promise<CredentialsError | undefined> {
    if (attempt.crashed) return undefined;
    this.world.proxy.plan(fault);
    let refused: CredentialsError | undefined;
    await attempt.relay.step().catch((error: { code?: string }) => {
      if (error instanceof CredentialsError) {
        refused = error;
        return;
      }
      if (error instanceof FencedError) {
        // A relay delivers the whole file: on a shared file the fence may be of another task's attempt,
        // whose rows are parked while this task's go on. Only a fence of this attempt stops it.
        if (attempt.box.file.runs.supersededBy({ runId: RUN_ID, task: this.name }, attempt.attempt) !== undefined) this.fence(attempt, error);
        return;
      }
      // A failed request goes again at the next step; another relay may hold a shared file's lease.
      if (!(error instanceof DeliveryError) && error.code !== 'lease_lost') throw error;
    });
    this.world.proxy.clearPlan();
    const own = attempt.token === this.tenant.tokens.job;
    expect('G17', !(own && refused), () => `${this.tenant.name}/${this.name}: the server refused the job's own token: ${refused!.message}`);
    return refused;
  }

  /** The current process is gone (its file closed, its lease left to lapse on the clock): what a restart or a retry starts from. */
  private handOver(): Attempt {
    const before = this.current;
    this.crash(before);
    this.world.clock += LEASE_TTL_MS + 1;
    return before;
  }

  /** A crash: the handle is dropped without draining or releasing the lease; the file is all that is left. */
  crash(attempt: Attempt | undefined): void {
    if (!attempt || attempt.crashed) return;
    attempt.crashed = true;
    attempt.box.file.close();
  }

  /** The task's process died and is started again as the same attempt, on the same file (with `token`, its own by default). */
  async restart(token = this.tenant.tokens.job): Promise<void> {
    const before = this.handOver();
    this.current = await this.open(before.path, before.attempt, token);
    // An attempt that had ended stays ended: its process only exits again; a runner retries with the next.
    this.current.ended = before.ended;
  }

  /**
   * A user's mistake and its printed fix: the task's process is started again with a token that may not
   * publish its stream (a read token, its consumer's, another tenant's job token), its relay running in
   * process as a job's does. The server refuses it at open, or the job commits a batch and its relay
   * stops at the first refusal (G19): the refusal shows in `status()`, a receipt awaited before it and
   * one asked for after it both reject with the CredentialsError that names the fix, and nothing is lost
   * (G3). The user restarts the job with its own token, as the error says, and the batch is delivered.
   */
  async wrongToken(token: string): Promise<void> {
    if (this.over || !live(this.current) || this.current.ended) return;
    const label = `${this.tenant.name}/${this.name}`;
    const before = this.handOver();
    const openedAt = new Date(this.world.clock).toISOString();
    // No fault of an earlier step left for the checks at open: each request the open makes is answered.
    this.world.proxy.clearPlan();
    const heard = this.world.answers.length;
    const wrong = await this.open(before.path, before.attempt, token, 'in-process').catch((error: unknown) => error);
    // Each of these tokens is one the server refuses for this job: the open must refuse it whenever the
    // server's answers to its checks said so (its stream refused, 401 or 403; or a read token's scope, told
    // by GET /v1/token), and may let it through only when the server did not answer them.
    const answers = this.world.answers.slice(heard).filter((answer) => answer.method === 'GET');
    const told = answers.some((answer) => answer.status === 401 || answer.status === 403) || (token === this.tenant.tokens.reader && answers.some((answer) => answer.url.startsWith('/v1/token') && answer.status === 200));
    expect('G17', !('box' in (wrong as object)) || !told, () => `${label}: a token the server refuses for this job (${Object.entries(this.tenant.tokens).find(([, value]) => value === token)?.[0] ?? "another tenant's job token"}) was let through at open, though the server's answers said so (${JSON.stringify(answers)}): the job would do its work and its relay stop at the first delivery`);
    if (!('box' in (wrong as object))) {
      this.world.happened('wrong token refused at open');
      expect('G19', wrong instanceof CredentialsError, () => `${label}: a wrong token at open failed with ${String(wrong)}, not a CredentialsError`);
      this.current = await this.open(before.path, before.attempt);
      this.current.ended = before.ended;
      return;
    }
    const attempt = wrong as Attempt;
    this.current = attempt;
    this.current.ended = before.ended;
    try {
      await this.whileRefused(attempt, openedAt);
    } finally {
      // Its relay runs on its own: it stops with the file's close, whatever the checks found.
      await attempt.box.close({ timeoutMs: 0 });
      attempt.crashed = true;
    }
    await this.restart();
  }

  /** The wrong token's attempt commits a batch; its relay must stop on the refusal, say so, and lose nothing. */
  private async whileRefused(attempt: Attempt, openedAt: string): Promise<void> {
    const label = `${this.tenant.name}/${this.name}`;
    const committed = this.commit(attempt);
    if (committed !== undefined) {
      const early = committed.ready.receipt().then(
        () => 'delivered',
        (error: unknown) => error,
      );
      const pending = attempt.box.file.pendingCount();
      // The relay runs on its own: wait for the refusal it records (this attempt's, not one an earlier run left in the file).
      const refusal = await until(() => {
        const error = attempt.box.status().lastError;
        return error !== null && error.at >= openedAt && (error.code === 'forbidden' || error.code === 'unauthorized') ? error : undefined;
      });
      expect('G19', refusal !== undefined, () => `${label}: a relay with a refused token never showed the refusal in status(): ${JSON.stringify(attempt.box.status().lastError)}`);
      expect('G19', /token/i.test(refusal!.message), () => `${label}: the refusal does not name its fix: ${refusal!.message}`);
      const settled = async (receipt: Promise<unknown>) => Promise.race([receipt, new Promise((resolve) => setTimeout(() => resolve('still waiting'), 50))]);
      const late = committed.ready.receipt().then(
        () => 'delivered',
        (error: unknown) => error,
      );
      for (const [when, receipt] of [['awaited before the refusal', early], ['asked for after it', late]] as const) {
        const outcome = await settled(receipt);
        expect('G19', outcome instanceof CredentialsError, () => `${label}: a receipt ${when} came to ${String(outcome)}, not the CredentialsError that stopped the relay`);
      }
      expect('G3', attempt.box.file.pendingCount() === pending, () => `${label}: a refused delivery changed the rows waiting (${pending} before, ${attempt.box.file.pendingCount()} after)`);
      this.world.happened('wrong token stopped the relay at its first request');
    }
  }

  /**
   * The task's file is delivered by `oncebox relay FILE --server URL` running beside the job, as the docs
   * show for a job opened with `relay: 'external'`: it delivers what is waiting, goes on running while
   * idle, and delivers the batch the job commits then; it stops on SIGTERM, as a supervisor stops it (G3).
   */
  async deliverWithRelayCommand(): Promise<void> {
    const attempt = this.current;
    if (!live(attempt)) return;
    const label = `${this.tenant.name}/${this.name}`;
    // Through a hop that closes idle connections: once it has delivered, the relay holds no socket, and
    // only its own keep-alive keeps it up for the next commit.
    const hop = await startIdleCloser(this.world.proxy.url, 200);
    const relay = startOncebox(['relay', attempt.path, '--server', hop.url], { ONCEBOX_TOKEN: this.tenant.tokens.job });
    try {
      const idle = await until(() => ((attempt.box.file.pendingCount() === 0 && hop.accepted > 0 && hop.open() === 0) || !relay.running() ? true : undefined));
      expect('liveness', idle === true, () => `${label}: \`oncebox relay\` did not deliver what was waiting in a minute`);
      const committed = this.commit(attempt);
      if (committed !== undefined) {
        const delivered = await until(() => (attempt.box.file.pendingCount() === 0 || !relay.running() ? true : undefined));
        expect('liveness', delivered === true, () => `${label}: \`oncebox relay\` did not deliver batch ${committed.batch} in a minute`);
      }
      const ended = relay.running() ? undefined : await relay.done;
      expect('G3', ended === undefined, () => `${label}: \`oncebox relay\` (not --drain) exited on its own (code ${ended!.code}, signal ${ended!.signal}), leaving ${attempt.box.file.pendingCount()} rows: ${relay.output().slice(-300)}`);
      this.world.happened('oncebox relay delivered beside the job');
    } finally {
      await relay.stop('SIGTERM');
      await hop.close();
    }
  }

  /** What a job process of this task is started with: its current attempt on `path`, `batches` batches to commit. */
  private processArgs(path: string, attempt: number, batches: number): JobProcessArgs {
    return {
      path,
      server: this.world.proxy.url,
      token: this.tenant.tokens.job,
      producer: this.producer,
      task: this.name,
      attempt,
      resume: this.resume,
      assets: this.tenant.assets,
      batches,
      clock: this.world.clock,
      leaseTtlMs: LEASE_TTL_MS,
      newShape: this.newShape,
      sharedPartitions: this.tenant.sharedPartitions,
    };
  }

  /**
   * The task's process is a real one for a while: the current attempt goes on in a process of its own
   * (its file handed over as at a restart), commits `batches` batches and drains, and is killed with
   * SIGKILL at the `hit`-th pass of `point`, wherever in SQLite's commit or the relay's answer that is.
   * Then it is started again in process as the same attempt on the same file (G1, G2, G3, G12).
   */
  async killedAt(point: JobKillPoint, hit: number, batches: number): Promise<void> {
    await this.inProcessOfItsOwn(point, hit, batches, '', (outcome, label, at) => {
      this.world.happened(outcome.killed ? `job process killed at ${point}` : `job process not killed (${point} passed fewer than ${at} times)`);
      expect('liveness', outcome.killed || outcome.code === 0, () => `${label}: its job process failed: ${outcome.code ?? outcome.signal} ${outcome.output.slice(-500)}`);
    });
  }

  /**
   * As killedAt, but the disk is full at `point` once (SQLite's SQLITE_FULL): a commit fails whole and the
   * job does the batch again, or the relay cannot record the server's answers and sends them again; the
   * process still ends with everything delivered (G1, G3).
   */
  async diskFullAt(point: DiskFullPoint, hit: number, batches: number): Promise<void> {
    await this.inProcessOfItsOwn(point, hit, batches, ':throw=SQLITE_FULL', (outcome, label, at) => {
      const result = lastReport(outcome);
      expect('G3', outcome.code === 0 && result?.pending === 0, () => `${label}: a full disk at ${point} (once) left its job process with ${result?.pending ?? '?'} rows undelivered (last error ${result?.lastError ?? '?'}, exit ${outcome.code ?? outcome.signal}): ${outcome.output.slice(-500)}`);
      this.world.happened(outcome.output.includes('"throw":"SQLITE_FULL"') ? `disk full at ${point}, then delivered` : `disk not full (${point} passed fewer than ${at} times)`);
    });
  }

  /** The current attempt goes on in a job process on its file, `action` at the `hit`-th pass of `point` (a kill unless said), then in process again. */
  private async inProcessOfItsOwn(point: JobKillPoint, hit: number, batches: number, action: string, judge: (outcome: ProcessOutcome, label: string, at: number) => void): Promise<void> {
    if (this.over || !live(this.current) || this.current.ended) return;
    const before = this.handOver();
    const started = Date.now();
    // A commit's points are passed once a batch: the failpoint strikes at one of its batches.
    const at = point.startsWith('commit:') ? Math.min(hit, batches) : hit;
    const outcome = await runSimProcess('sim/job-process.ts', this.processArgs(before.path, before.attempt, batches), `${point}@${at}${action}`);
    judge(outcome, `${this.tenant.name}/${this.name} (attempt ${before.attempt})`, at);
    // Its clock ran with real time: the simulation's moves past it, and past the lease it may have left.
    this.world.clock += Date.now() - started + LEASE_TTL_MS + 1;
    this.current = await this.open(before.path, before.attempt);
    this.current.ended = before.ended;
    this.furthest = Math.max(this.furthest, this.batch(this.current));
  }

  /**
   * The current attempt goes on as a real process, commits `hit` batches and is frozen there (SIGSTOP,
   * as a paused VM or a stalled machine is): its heartbeat lost, a runner starts the next attempt. The
   * frozen process is continued with `thaw` once the retry has delivered.
   */
  async freeze(hit: number, more: number): Promise<RunningProcess | undefined> {
    if (this.over || !live(this.current) || this.current.ended) return undefined;
    const before = this.handOver();
    const started = Date.now();
    const frozen = startSimProcess('sim/job-process.ts', this.processArgs(before.path, before.attempt, hit + more), `commit:after-commit@${hit}:stop`);
    const stopped = await until(() => (frozen.output().includes('"stop":true') || !frozen.running() ? true : undefined));
    expect('liveness', stopped === true && frozen.running(), () => `${this.tenant.name}/${this.name}: its job process did not reach batch ${hit} in a minute: ${frozen.output().slice(-500)}`);
    // Frozen, its lease lapses on the world's clock as its heartbeat would.
    this.world.clock += Date.now() - started + LEASE_TTL_MS + 1;
    return frozen;
  }

  /**
   * The frozen attempt goes on (SIGCONT) after its retry delivered: it commits its next batches and its
   * relay delivers, and it must learn that it is fenced (G10): its commit refused on its retry's file, its
   * deliveries fenced by the server on its own. What it committed before it froze is the task's all the same.
   */
  async thaw(frozen: RunningProcess, frozenPath: string): Promise<void> {
    const started = Date.now();
    frozen.signal('SIGCONT');
    const outcome = await frozen.done;
    const result = lastReport(outcome);
    expect('G10', outcome.code === 3 || result?.fenced === true, () => `${this.tenant.name}/${this.name}: a frozen attempt went on after attempt ${this.current.attempt} delivered, and was not told it is fenced (exit ${outcome.code ?? outcome.signal}): ${outcome.output.slice(-500)}`);
    this.world.happened(`frozen job process thawed and fenced (${frozenPath === this.current.path ? "on its retry's file" : 'on its own file'})`);
    this.world.clock += Date.now() - started + LEASE_TTL_MS + 1;
  }

  /**
   * The task's current attempt is started again with its relay in process, running on its own as a
   * job's does, rather than stepped by the scenario: beside the other tasks of a shared file, whose
   * commits the relay holding the file's lease must see and deliver (G3).
   */
  async relayOnItsOwn(): Promise<boolean> {
    if (!live(this.current)) return false;
    const before = this.handOver();
    this.current = await this.open(before.path, before.attempt, this.tenant.tokens.job, 'in-process');
    this.current.ended = before.ended;
    return true;
  }

  /** Back from relayOnItsOwn: the process stops its relay and exits, and the attempt starts again as before. */
  async relayByHand(): Promise<void> {
    const attempt = this.current;
    if (!attempt.crashed) {
      await attempt.box.close({ timeoutMs: 0 });
      attempt.crashed = true;
    }
    if (!attempt.fenced) await this.restart();
  }

  /**
   * A user's mistake and its fix: the task is retried with an attempt far above the run's (a runner's
   * counter misread, a timestamp for a try number), on a fresh machine. The server refuses its requests
   * whole (`attempt_too_high`), its rows go dead with that code, and the run's epoch does not move (G10:
   * a number that high would fence every later attempt for good); the user reruns the task with its real
   * try number, as the refusal says, on the machine it ran on, and the run goes on.
   */
  async wrongAttempt(above: number): Promise<void> {
    if (this.over || !live(this.current) || this.current.ended) return;
    const label = `${this.tenant.name}/${this.name}`;
    const before = this.handOver();
    const wrong = await this.open(this.world.newPath(`${this.tenant.name}-${this.name}`), this.latestAttempt() + above);
    this.world.expectedRefusals.add(`${this.producer} attempt_too_high`);
    if (this.commit(wrong) !== undefined) {
      for (let round = 0; live(wrong) && wrong.box.file.pendingCount() > 0; round++) {
        expect('liveness', round < 20, () => `${label}: attempt ${wrong.attempt}'s rows were neither delivered nor refused`);
        await this.step(wrong, 'forward');
      }
      const dead = new DeadLetters(wrong.box.file).list();
      expect('G8', dead.length > 0 && dead.every((row) => row.code === 'attempt_too_high' && /try number/.test(row.reason)), () => `${label}: attempt ${wrong.attempt} (far above the run's) left dead rows ${JSON.stringify(dead.map((row) => [row.code, row.reason]))}, want attempt_too_high naming the fix`);
      this.world.happened('an attempt far above the run\'s refused whole');
    }
    this.crash(wrong);
    this.current = await this.open(before.path, this.latestAttempt() + 1);
  }

  /** A retry: the next attempt, on the same machine (its file), a fresh one (a new file), or back on its first machine. */
  async retry(machine: Machine, claim?: 'claim' | 'exactly'): Promise<void> {
    return this.retryAt(this.pathOn(machine, this.current.path), claim);
  }

  /** A retry on the machine whose file is `path` (the zombie's, say): the next attempt there. */
  async retryAt(path: string, claim?: 'claim' | 'exactly'): Promise<void> {
    if (this.over) return;
    this.outcome = undefined;
    this.handOver();
    const latest = this.latestAttempt();
    // The zombie, if any, dies with the move: a retry on its machine is its machine's next process.
    if (this.zombie?.path === path) this.endZombie();
    // Counted by the runner, or claimed from the server: the next it hands out, or exactly the runner's number.
    this.current = await this.open(path, claim === undefined ? latest + 1 : claim === 'claim' ? 'claim' : { next: async (floor) => Math.max(latest, floor) + 1 });
  }

  /**
   * The run failed for good, and its owner tries it again after all: a later attempt on `machine` holds
   * again what the failure discarded (from the file, or on a fresh machine from the server's copy), and
   * its success releases it (G25). False when the task's run has not failed for good.
   */
  async triedAgainAfterAll(machine: Machine): Promise<boolean> {
    if (this.outcome !== 'fail for good') return false;
    this.outcome = undefined;
    await this.retry(machine);
    this.world.happened(`a run failed for good tried again after all (${machine} machine)`);
    return true;
  }

  /**
   * A retry whose attempt is claimed from the server: the next it hands out (`'claim'`: above the highest
   * attempt the server has heard of, which an attempt that never delivered is not), or exactly the
   * runner's number (through an attempt source, above every attempt the task had). Either runs above all
   * the server knows (G26).
   */
  async claimedRetry(machine: Machine, claim: 'claim' | 'exactly'): Promise<void> {
    if (this.over) return;
    const epoch = await this.serverEpoch();
    const latest = this.latestAttempt();
    await this.retry(machine, claim);
    const floor = claim === 'claim' ? epoch : Math.max(epoch, latest);
    expect('G26', this.current.attempt > floor, () => `${this.tenant.name}/${this.name}: a retry claiming (${claim}) runs as attempt ${this.current.attempt}, though the server had heard of attempt ${epoch} and the task's latest was ${latest}`);
  }

  /** The highest attempt of this task the server has heard of (its stream's epoch), as the catalog shows it. */
  private async serverEpoch(): Promise<number> {
    const response = await this.world.fetch('/v1/catalog/streams?limit=200', { headers: { authorization: `Bearer ${this.tenant.tokens.reader}` } });
    const page = (await response.json()) as Page<StreamSummary>;
    return page.items.find((item) => item.producer === this.producer && item.runId === RUN_ID && item.task === this.name)?.epoch ?? 0;
  }

  /**
   * A second copy of the task's current attempt starts on a fresh machine, its runner's counter proposing
   * the number the current one already holds (a worker that took its number and paused before claiming
   * it): the server refuses that exact claim, the source is asked again above the run's epoch, and the
   * copy runs as the newest attempt (G26). The attempt it found becomes a zombie, fenced by the claim.
   */
  async copyClaimsSameNumber(): Promise<void> {
    if (this.over || !live(this.current)) return;
    const taken = this.current.attempt;
    let asked = 0;
    this.crash(this.zombie);
    this.zombie = this.current;
    this.current = await this.open(this.world.newPath(`${this.tenant.name}-${this.name}`), { next: async (floor) => (++asked === 1 ? taken : Math.max(taken, floor) + 1) });
    expect('G26', this.current.attempt > taken, () => `${this.tenant.name}/${this.name}: a copy claiming exactly attempt ${taken}, which the run's newest attempt holds, runs as attempt ${this.current.attempt}`);
    this.world.happened(asked > 1 ? 'a late exact claim refused, then granted above the epoch' : 'an exact claim granted at once');
  }

  /** The zombie, if any, dies: its process is gone, its file left as it was. */
  endZombie(): void {
    this.crash(this.zombie);
    this.zombie = undefined;
  }

  /** The current attempt lost its heartbeat, not its process: its retry starts beside it. */
  async startZombie(machine: Machine): Promise<void> {
    if (this.over) return;
    this.outcome = undefined;
    this.crash(this.zombie);
    this.zombie = this.current;
    this.current = await this.open(this.pathOn(machine, this.zombie.path), this.latestAttempt() + 1);
  }

  /** The task's first machine: where a retry 'back on its first machine' lands (its file moved aside, a new one). */
  get firstMachine(): string {
    return this.firstPath;
  }

  set firstMachine(path: string) {
    this.firstPath = path;
  }

  /** The file a process on `machine` opens, the current one being on `here`. */
  private pathOn(machine: Machine, here: string): string {
    if (machine === 'same') return here;
    return machine === 'first' ? this.firstPath : this.world.newPath(`${this.tenant.name}-${this.name}`);
  }

  /**
   * The documented fix of a misspelt asset: the job's token lists the misspelt asset by mistake, so the
   * server refuses it as unknown; register it (an operator's choice here: the events are wanted under the
   * name they were sent with), then `oncebox dead retry FILE --all`, as the refusal's fix says.
   */
  async fixTypo(): Promise<void> {
    if (this.current.crashed) return;
    // Through another instance than the jobs deliver to, where there are two: as an operator's command would.
    await this.world.otherServer.store.registerAsset(this.tenant.assets.typo);
    new DeadLetters(this.current.box.file).retry('all', 'asset registered');
  }

  private stopped(attempt: Attempt, error: unknown): boolean {
    if (error instanceof RunEndedError) {
      attempt.ended = true;
      return true;
    }
    if (error instanceof FencedError) {
      this.fence(attempt, error);
      return true;
    }
    return false;
  }

  /**
   * `attempt` was told it is fenced: a job stops then. Only an attempt older than the task's newest can
   * be (G10): a fence of the newest, with no later attempt of the task anywhere, is another task's (or
   * another run's) attempt taken for this one's.
   */
  private fence(attempt: Attempt, error: FencedError): void {
    attempt.fenced = true;
    expect('G10', attempt.attempt < this.latestAttempt(), () => `${this.tenant.name}/${this.name}: its newest attempt ${attempt.attempt} was told it is fenced, though no later attempt of the task exists: ${error.message}`);
  }
}

export const live = (attempt: Attempt | undefined): attempt is Attempt => attempt !== undefined && !attempt.crashed && !attempt.fenced;

/** What a job process reported as it ended (sim/job-process.ts), if it got that far. */
function lastReport(outcome: ProcessOutcome): { committed: number; pending: number; commitErrors: number; fenced: boolean; lastError: string | null } | undefined {
  const line = outcome.output
    .split('\n')
    .reverse()
    .find((text) => text.startsWith('{"committed"'));
  return line === undefined ? undefined : JSON.parse(line);
}
