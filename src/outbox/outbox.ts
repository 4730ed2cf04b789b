import type { z } from 'zod';
import { Checkpoint } from '../checkpoint/checkpoint.js';
import { assetNameSchema, describeFirstIssue, emissionPayloadSchema } from '../protocol/emission.js';
import { CredentialsError, EmissionValidationError, NoRunContextError, NotCommittedError, OutboxClosedError, OutboxWriteError, RunEndedError } from '../protocol/errors.js';
import { isTransientSqliteError } from '../sqlite/local-errors.js';
import { activeTraceContext, loadOtel, type OtelApi } from '../protocol/trace.js';
import type { Receipt, StreamState, TokenScopeAnswer } from '../protocol/wire.js';
import { CommitTransaction, describeFailure, type CommitContext, type Terminal } from './commit/commit.js';
import type { Emission } from './commit/emission.js';
import { Asset } from './asset.js';
import { failpoint } from '../failpoints/failpoints.js';
import { OutboxFile } from './file/outbox-file.js';
import type { OutboxRow } from './file/schema.js';
import type { ClaimedOptions, RunContext } from './options.js';
import { endsReceipts, fromRow, ReceiptWaiters } from './receipts.js';
import { waitUntilDrained } from './relay/file-watch.js';
import type { Relay } from './relay/relay.js';
import { assembleDelivery, assertStreamToken } from './relay/assemble.js';
import { assertAssetInScope } from './token-assets.js';
import { assertSyncCallback, refusePromise } from './commit/sync-callback.js';
import type { OutboxLogger } from '../client/logger.js';
import type { OutboxEventMap } from './events.js';
import type { Fence, RunKey } from './run.js';
import { resumeFromServer } from './resume.js';
import { readStatus, type OutboxStatus } from './status.js';
import { CheckpointNames } from './checkpoint-names.js';
import { leftoversOf, type CloseOptions, type CloseResult } from './leftovers.js';

export type { CloseOptions, CloseResult } from './leftovers.js';
import { OutboxMetrics } from './metrics.js';
import type { Reporter } from './relay/reporter.js';
import type { ServerClient } from '../client/server-client.js';
import { runKeyOf, wireTask } from './run.js';

/** What `box.complete` and `box.fail` return. */
export interface TerminalResult<R> {
  outcome: 'succeeded' | 'failed';
  /** False when this attempt had ended this way already: the call did nothing, and `fn` did not run. */
  recorded: boolean;
  /** What `fn` returned. */
  value: R | undefined;
  /** The lifecycle event (`oncebox.run_succeeded` or `oncebox.run_failed`): await its `receipt()`. */
  event: Emission | undefined;
}

/** An open outbox: the producer's side of oncebox. Create it with `openOutbox`. */
export class Outbox {
  /** @internal */ readonly file: OutboxFile;
  /** The relay of this process, or undefined with `relay: 'external'`. @internal */
  readonly relay: Relay | undefined;
  readonly producer: string;
  readonly run: RunContext | undefined;
  private readonly options: ClaimedOptions;
  /** The one client for the server, for delivery and for resuming; none without a server. */
  private readonly client: ServerClient | undefined;
  private readonly waiters = new ReceiptWaiters();
  private readonly reporter: Reporter;
  private readonly metrics: OutboxMetrics | undefined;
  /** OpenTelemetry's API when the application has it; loaded by start(), before the first commit. */
  private otel: OtelApi | undefined;
  private readonly logger: OutboxLogger;
  private readonly commitContext: CommitContext | undefined;
  /** This attempt's outcome, once its terminal commit is made: no commit follows it. */
  private ended: 'succeeded' | 'failed' | undefined;
  private readonly runInTransaction;
  /** This run's stream in the file, when opened with a run context. */
  private readonly runKey: RunKey | undefined;
  /** The highest attempt of this run whose rows the file held when this one opened it. */
  private readonly lastWriter: number | undefined;
  private closed = false;
  /** The checkpoint names this job defined. */
  private readonly checkpointNames = new CheckpointNames();
  private closing: Promise<CloseResult> | undefined;
  /** What the job's token may do, as the server said at open (with an in-process relay). */
  private tokenScope: TokenScopeAnswer | undefined;
  /** The status close() read as it closed the file; set once the file is closed. */
  private statusAtClose: OutboxStatus | undefined;
  /** The server's stream state this retry resumed from, when it did (a fresh machine). */
  resumedFrom: StreamState | undefined;

  /** @internal Use openOutbox. */
  constructor(options: ClaimedOptions, file: OutboxFile, client: ServerClient | undefined) {
    this.options = options;
    this.client = client;
    this.producer = options.producer;
    this.run = options.run;
    this.file = file;
    // First: a relay is built only on a file that names its producer (openResolvedOutbox closes it on a throw).
    this.file.bindProducer(options.producer);
    const delivery = assembleDelivery(file, options, options.relay === 'external' ? undefined : client, {
      pending: () => (this.closed && !this.file.db.open ? { events: 0, checkpoints: 0 } : this.file.pendingByKind()),
      onSettled: (rows) => {
        this.waiters.settle(rows);
        this.metrics?.settled(rows, Date.now());
      },
      // A relay stopped for good (a refused token, a server that lost what it acknowledged) delivers
      // nothing more: the receipts awaited say why now, not at close. A lost lease is not such a stop:
      // the relay that took the lease delivers, and the receipts come through the file.
      onStopped: (error) => {
        if (endsReceipts(error)) this.waiters.rejectAll(error);
      },
    });
    this.logger = delivery.logger;
    this.reporter = delivery.reporter;
    this.relay = delivery.relay;
    this.metrics =
      options.metrics &&
      new OutboxMetrics(options.metrics, {
        producer: options.producer,
        pending: () => this.file.pendingCount(),
        dead: () => this.file.deadCount(),
      });
    try {
      if (options.run) {
        this.runKey = runKeyOf(options.run);
        this.lastWriter = this.file.runs.open(this.runKey, options.run.attempt).lastWriter;
        this.commitContext = {
          file: this.file,
          producer: options.producer,
          run: options.run,
          payloadSchema: emissionPayloadSchema(options.maxExtraBytes),
          waitFor: (emission) => this.receiptOf(emission),
          traceContext: () => activeTraceContext(this.otel),
        };
      }
    } catch (error) {
      this.metrics?.detach();
      this.file.close();
      throw error;
    }
    this.runInTransaction = this.file.db.transaction(<R>(tx: CommitTransaction, fn: (tx: CommitTransaction) => R): R => {
      // Inside the transaction, under the write lock: no later attempt can open the file between this
      // check and the rows it guards.
      this.file.runs.assertCurrent(this.runKey!, this.run!.attempt);
      const result = fn(tx);
      refusePromise(result);
      tx.write(Date.now());
      failpoint('commit:after-write');
      return result;
    });
    this.file.meta.write('run', options.run ?? null);
  }

  /** @internal Resumes from the server when the policy says so, then starts the relay. */
  async start(): Promise<void> {
    this.otel = await loadOtel();
    this.relay?.useTracing(this.otel);
    const { run } = this.options;
    if (run && this.client) {
      this.resumedFrom = await resumeFromServer({
        file: this.file,
        producer: this.producer,
        run,
        lastWriter: this.lastWriter,
        client: this.client,
        policy: this.options.resume,
        resumeTimeoutMs: this.options.resumeTimeoutMs,
      });
    }
    if (this.options.relay === 'in-process' && run && this.client) {
      // A job whose token the server refuses learns it here, at open, not from a relay that would find
      // nothing to deliver until its first commit. A server that is down or slow is the relay's to wait for.
      this.tokenScope = await assertStreamToken(this.client, this.producer, run, this.options.requestTimeoutMs);
    }
    if (this.options.relay === 'in-process') this.relay!.start();
  }

  /**
   * Listens to what the relay of this process sees: `delivered` (receipts, in batches), `dead` (an
   * emission refused for good), `fenced` (a later attempt delivered; this process should stop), and
   * `error` (delivery has been failing for `reportAfterMs`, or the relay stopped). Each is also logged.
   */
  on<E extends keyof OutboxEventMap>(event: E, listener: (...args: OutboxEventMap[E]) => void): this {
    this.reporter.events.on(event, listener as never);
    return this;
  }

  off<E extends keyof OutboxEventMap>(event: E, listener: (...args: OutboxEventMap[E]) => void): this {
    this.reporter.events.off(event, listener as never);
    return this;
  }

  /** The file's path. */
  get path(): string {
    return this.file.path;
  }

  /** A handle on a registered asset. The server refuses names it does not know. */
  asset(name: string): Asset {
    const parsed = assetNameSchema.safeParse(name);
    if (!parsed.success) {
      const { message } = describeFirstIssue(parsed.error, { input: name, prefix: 'asset' });
      throw new EmissionValidationError('asset', message);
    }
    assertAssetInScope(parsed.data, this.tokenScope);
    return new Asset(parsed.data, (fn) => this.commit(fn));
  }

  /** A named checkpoint, typed and validated by `schema`. */
  checkpoint<Schema extends z.ZodType>(name: string, schema: Schema): Checkpoint<z.output<Schema>> {
    const admitted = this.checkpointNames.admit(name, schema);
    return new Checkpoint(admitted, schema as z.ZodType<z.output<Schema>>, {
      // Without a run there is no progress to read: such an outbox commits nothing either.
      read: (checkpointName) => {
        if (this.statusAtClose !== undefined) throw new OutboxClosedError(`${this.path}: the outbox is closed; read checkpoints before close()`);
        return this.runKey === undefined ? undefined : this.file.checkpoints.getCheckpoint.get({ ...this.runKey, name: checkpointName })?.value;
      },
    });
  }

  /**
   * Runs `fn` in one synchronous SQLite transaction (BEGIN IMMEDIATE). Every `tx.set` and `tx.emit`
   * in it is written together when `fn` returns, durably (with the default durability) by the time
   * `commit` returns, or not at all when `fn` throws. Returns what `fn` returns.
   */
  commit<R>(fn: (tx: CommitTransaction) => R): R {
    const context = this.assertCanCommit();
    if (this.ended !== undefined) {
      throw new RunEndedError(`${this.path}: attempt ${this.run!.attempt} of run ${this.run!.runId} has ${this.ended}; it commits nothing more`);
    }
    assertSyncCallback(fn, 'commit(fn)');
    failpoint('commit:before');
    return this.transact(new CommitTransaction(context), fn);
  }

  /**
   * Runs `body` in the commit's transaction, then tells the emissions they are committed and wakes the
   * relay. `quiet` leaves out the crash tests' failpoint, for a commit the job did not ask for.
   */
  private transact<T>(tx: CommitTransaction, body: (tx: CommitTransaction) => T, quiet = false): T {
    let result: T;
    try {
      result = this.runInTransaction.immediate(tx, body) as T;
    } catch (error) {
      // SQLite's own errors of the moment get a typed error naming the fix; the job's own pass unchanged.
      throw isTransientSqliteError(error) ? new OutboxWriteError(this.path, error) : error;
    }
    tx.committed();
    if (!quiet) failpoint('commit:after-commit');
    // A checkpoint update goes at once too: it is the server's copy a retry on a fresh machine resumes from.
    if (tx.wroteRows) this.relay?.notify();
    return result;
  }

  /**
   * The attempt's successful end, in one transaction: `fn`'s own writes and emissions, the release of
   * every emission of the run held with `on: 'success'` (into the outbox, with their keys), the
   * attempt's outcome, and the run's success event on `oncebox.run_succeeded`, which the server keeps
   * once per run. After it, this attempt commits nothing more. Called again after a success, it does
   * nothing (`recorded: false`); after `fail`, it throws RunEndedError. A fenced attempt's is refused.
   */
  complete<R>(fn?: (tx: CommitTransaction) => R): TerminalResult<R> {
    return this.endRun({ outcome: 'succeeded' }, fn, 'complete');
  }

  /**
   * The attempt's failed end, in one transaction: `fn`'s own writes and emissions (say, "ingest failed
   * for partition X"), the attempt's outcome, and a failure event on `oncebox.run_failed`, which the
   * server keeps once per attempt. The run's held emissions are discarded (recorded, and counted in
   * `status().discarded`), unless `willRetry` says a retry is to come: they then stay held for the
   * attempt that succeeds, which resumes from the checkpoint and does not hold them again. Called again in
   * the same attempt (a failure callback run twice), it does nothing (`recorded: false`); after
   * `complete`, it throws RunEndedError.
   */
  fail<R>(error: unknown, fn?: (tx: CommitTransaction) => R, options: { willRetry?: boolean } = {}): TerminalResult<R> {
    return this.endRun({ outcome: 'failed', error: describeFailure(error), willRetry: options.willRetry ?? false }, fn, 'fail');
  }

  private endRun<R>(terminal: Terminal, fn: ((tx: CommitTransaction) => R) | undefined, verb: string): TerminalResult<R> {
    const context = this.assertCanCommit();
    if (fn !== undefined) assertSyncCallback(fn, `${verb}(fn)`);
    const run = this.run!;
    const tx = new CommitTransaction(context);
    const ended = this.transact(tx, (inner) => {
      const earlier = this.file.terminal.outcomeOf.get({ ...runKeyOf(run), attempt: run.attempt });
      if (earlier !== undefined) {
        if (earlier.outcome === terminal.outcome) return { recorded: false, value: undefined };
        throw new RunEndedError(`box.${verb}(): attempt ${run.attempt} of run ${run.runId} has ${earlier.outcome} already; an attempt ends once`);
      }
      const value = fn?.(inner);
      refusePromise(value);
      inner.endRun(terminal);
      failpoint('terminal:after-write');
      return { recorded: true, value: value as R | undefined };
    });
    this.ended = terminal.outcome;
    return { outcome: terminal.outcome, recorded: ended.recorded, value: ended.value, event: tx.lifecycleEvent };
  }

  /**
   * @internal When the last attempt that wrote to this file is older than this one and never ended (it
   * was killed, or stalled and taken over), records its fence as an `oncebox.run_fenced` event, for the
   * notifiers' `onFenced`.
   */
  noteFencedPredecessor(): void {
    const run = this.run;
    const previous = this.lastWriter;
    if (run === undefined || this.commitContext === undefined || previous === undefined || previous >= run.attempt) return;
    if (this.file.terminal.outcomeOf.get({ ...runKeyOf(run), attempt: previous }) !== undefined) return;
    this.transact(new CommitTransaction(this.commitContext), (inner) => inner.noteFenced(previous), true);
  }

  /**
   * @internal Asks the server once for the run's epoch, and records a later attempt's fence in the file
   * when the server has seen one: for a process with nothing to deliver (an idle consumer), whose relay
   * would otherwise never hear of it. A server that cannot answer now is asked again next time; a
   * refused token is thrown.
   */
  async learnFenceFromServer(): Promise<void> {
    const run = this.run;
    if (run === undefined || this.client === undefined || this.closed) return;
    let state: StreamState | undefined;
    try {
      state = await this.client.streamState(this.producer, run.runId, wireTask(run.task), 0);
    } catch (error) {
      if (error instanceof CredentialsError) throw error;
      return;
    }
    if (state !== undefined && state.epoch > run.attempt && this.file.db.open) this.file.runs.recordFence(runKeyOf(run), state.epoch);
  }

  private assertCanCommit(): CommitContext {
    if (this.closed) throw new OutboxClosedError(`${this.path}: the outbox is closed; open it again to commit`);
    if (this.commitContext === undefined) {
      throw new NoRunContextError(
        `${this.path}: opened without a run context; pass run: { workflow, runId, attempt } to openOutbox to commit or emit`,
      );
    }
    return this.commitContext;
  }

  /** The fence on a row's attempt, if the server said a later one has delivered. */
  private fenceOf(row: OutboxRow): Fence | undefined {
    return this.file.runs.fenceOf({ runId: row.run_id, task: row.task }, row.attempt);
  }

  /** Counts and health of this outbox file, as `oncebox status` shows them; after close(), as it closed. */
  status(): OutboxStatus {
    // Once closed, the file is too: the status as close() left it, which is what a job logs at its end.
    return this.statusAtClose ?? readStatus(this.file, this.relay);
  }

  /**
   * Stops taking commits, waits (up to `timeoutMs`) for pending rows to be delivered, stops the relay
   * and closes the file. Rows still pending stay in the file for the next relay.
   */
  close(options: CloseOptions = {}): Promise<CloseResult> {
    this.closing ??= this.closeOnce(options.timeoutMs ?? 10_000);
    return this.closing;
  }

  private async closeOnce(timeoutMs: number): Promise<CloseResult> {
    this.closed = true;
    if (this.relay && this.options.relay === 'in-process') await this.relay.drain(timeoutMs);
    // With relay: 'external', `oncebox relay` delivers from another process: wait for it just the same.
    if (this.options.relay === 'external') await waitUntilDrained(this.file, timeoutMs);
    await this.relay?.stop();
    const status = this.status();
    const result = leftoversOf(this.path, status, this.options.servers);
    if (result.pending > 0 || result.dead > 0) {
      // The job is about to end: say what it leaves behind, once, where its operator will look.
      this.logger.warn({ code: 'closed_with_work_left', path: this.path, ...result, summary: undefined, deadRows: undefined }, `oncebox: ${result.summary}`);
    }
    this.metrics?.detach();
    this.waiters.rejectAll(new OutboxClosedError(`${this.path}: closed with the emission still pending; it stays in the file and the next relay on it delivers it`));
    this.statusAtClose = status;
    this.file.close();
    return result;
  }

  private receiptOf(emission: Emission): Promise<Receipt> {
    if (this.closed) {
      return Promise.reject(new OutboxClosedError(`${this.path}: the outbox is closed; receipts cannot be awaited`));
    }
    if (emission.rowId === undefined) {
      return Promise.reject(
        new NotCommittedError(`${this.path}: this emission is held for the run's success; await the receipt of the emission box.complete() releases, or of its lifecycle event`),
      );
    }
    const row = this.file.rows.rowById.get({ id: emission.rowId })!;
    const stopped = this.relay?.failure;
    if (row.state === 'pending' && stopped !== undefined && endsReceipts(stopped)) return Promise.reject(stopped);
    const promise = this.waiters.wait(row, emission.recommitted, this.fenceOf(row));
    if (row.state === 'pending') {
      // With no relay of ours delivering, receipts come from whichever process does, through the file.
      this.waiters.pollFile(
        (id) => {
          const settled = this.file.rows.rowById.get({ id });
          return settled === undefined || settled.state === 'pending' ? undefined : fromRow(settled, this.fenceOf(settled));
        },
        () => this.relay?.holdsLease === true && this.relay.failure === undefined,
      );
    }
    return promise;
  }
}
