import { setTimeout as sleep } from 'node:timers/promises';
import pRetry from 'p-retry';
import { FencedError, LeaseLostError, OnceboxError, ProducerErrorCode, WrongOutboxFileError } from '../../protocol/errors.js';
import type { OtelApi } from '../../protocol/trace.js';
import type { ItemResult, StreamIdentity } from '../../protocol/wire.js';
import { isTransientSqliteError } from '../../sqlite/local-errors.js';
import { afterAnswers, applyAnswers, type AppliedAnswers } from './answers.js';
import { batchHeaders, encodeBatch } from './batch-encoding.js';
import { cutBatches } from './batches.js';
import { sendInSpan } from './tracing.js';
import { waitUntilDrained, watchForeignCommits } from './file-watch.js';
import { failpoint } from '../../failpoints/failpoints.js';
import { RelayLease } from './lease.js';
import { DeliveredRows } from './pruning.js';
import type { OutboxFile } from '../file/outbox-file.js';
import type { OutboxRow } from '../file/schema.js';
import type { RelayError, SettledRow } from '../events.js';
import type { Reporter } from './reporter.js';
import { DeliveryError, type ServerClient } from '../../client/server-client.js';
import { RELAY_DEFAULTS, type DeliverySettings } from './defaults.js';
import { wireTask } from '../run.js';

/**
 * @internal What a relay is built from: the delivery settings it uses (each documented, with its
 * default, on OutboxOptions; a relay built without `maxInFlight` or `pruneDeliveredAfterMs` takes
 * RELAY_DEFAULTS' and keeps delivered rows), and its hooks.
 */
export type RelayOptions = Pick<DeliverySettings, 'batchMaxRows' | 'batchMaxBytes' | 'retryMinDelayMs' | 'retryMaxDelayMs' | 'leaseTtlMs'> &
  Partial<Pick<DeliverySettings, 'maxInFlight' | 'pruneDeliveredAfterMs'>> & {
    client: ServerClient;
    now: () => number;
    /** Told about every row the relay settled, with its final state; for receipt promises. */
    onSettled?: ((rows: readonly SettledRow[]) => void) | undefined;
    /** Logs and events for failures, dead rows and fences. */
    reporter?: Reporter | undefined;
    /** Told once when the relay stops for good (see `failure`). */
    onStopped?: ((error: OnceboxError) => void) | undefined;
  };

/** How often a relay standing by looks whether the lease holder has stopped or died. */
const STANDBY_CHECK_MS = 250;

/**
 * Delivers an outbox file's pending rows to the server in commit order, one batch at a time, and
 * marks each row with the server's answer for its key. It sleeps while there is nothing to send and is
 * woken by `notify()` (each commit calls it), so a commit is on its way at once, with no poll interval.
 * @internal
 */
export class Relay {
  private readonly lease: RelayLease;
  private readonly delivered: DeliveredRows;
  private readonly producer: string;
  private readonly stopper = new AbortController();
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private woken = false;
  private maxRows: number;
  private holding = false;
  private readonly applyResults;
  private otel: OtelApi | undefined;
  /** Why the relay stopped on its own (lease lost, stream state lost); undefined while it runs. */
  failure: OnceboxError | undefined;
  lastError: RelayError | undefined;

  constructor(
    private readonly file: OutboxFile,
    private readonly options: RelayOptions,
  ) {
    this.lease = new RelayLease(file, options.leaseTtlMs, options.now);
    this.delivered = new DeliveredRows(file.rows);
    this.maxRows = options.batchMaxRows;
    const producer = file.meta.read('producer');
    if (producer === undefined) {
      throw new WrongOutboxFileError(`${file.path}: no producer recorded in this outbox; a job opens it with openOutbox() first, and only then can it be relayed`);
    }
    this.producer = producer;
    this.applyResults = file.db.transaction((rows: readonly OutboxRow[], results: readonly ItemResult[]) => {
      // Proved inside the transaction that marks rows, so that the proof and the marks commit together.
      this.lease.confirm();
      return applyAnswers(file, rows, results, options.now());
    });
    this.lastError = file.meta.read('relay_last_error');
  }

  /** Makes a span for each batch sent, linked to the trace each emission was committed in. */
  useTracing(otel: OtelApi | undefined): void {
    this.otel = otel;
  }

  get holdsLease(): boolean {
    return this.holding;
  }

  start(): void {
    this.loop ??= this.run().catch((error: unknown) => {
      this.fail(error instanceof OnceboxError ? error : new OnceboxError('relay_failed', String(error), { cause: error }));
    });
    this.watchForeignCommits();
  }

  private foreignWatch: NodeJS.Timeout | undefined;

  /** Wakes the relay on a commit of another connection, which does not call notify(). */
  private watchForeignCommits(): void {
    this.foreignWatch ??= watchForeignCommits(this.file, () => this.notify());
  }

  /** Something was committed: deliver it now. */
  notify(): void {
    this.woken = true;
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  /**
   * Waits until no row is pending, for at most `timeoutMs`.
   * @returns true when drained.
   */
  drain(timeoutMs: number): Promise<boolean> {
    return waitUntilDrained(this.file, timeoutMs, () => this.failure !== undefined || this.stopper.signal.aborted);
  }

  /** Stops at once: a request in flight is abandoned (its rows stay pending) and the lease is released. */
  async stop(): Promise<void> {
    this.stopper.abort(new OutboxStopped());
    this.notify();
    await this.loop;
    this.releaseLease();
  }

  /**
   * One delivery attempt of the next batch, without retry: for tests and tools that drive the relay
   * by hand. Throws DeliveryError when the attempt got no per-item results.
   * @returns how many rows it settled (emissions and checkpoint updates), or 0 when nothing was pending.
   */
  async step(): Promise<number> {
    if (!this.holding) this.acquireOrThrow();
    try {
      return await this.deliverWindow(this.nextBatches(1));
    } catch (error) {
      // Another relay took the lease while this one was away: the next step asks for it again, as the
      // loop would, rather than fail every step on a lease it no longer holds.
      if (error instanceof LeaseLostError) this.holding = false;
      throw error;
    }
  }

  private acquireOrThrow(): void {
    const result = this.lease.tryAcquire();
    if (!result.acquired) {
      throw new LeaseLostError(
        `${this.file.path}: relay ${result.holder.owner} (pid ${result.holder.pid} on ${result.holder.host}) holds the lease until ${new Date(result.holder.expiresAt).toISOString()}`,
      );
    }
    this.holding = true;
  }

  private async run(): Promise<void> {
    const signal = this.stopper.signal;
    while (!signal.aborted) {
      if (!this.holding) {
        let result: ReturnType<RelayLease['tryAcquire']>;
        try {
          result = this.lease.tryAcquire();
        } catch (error) {
          if (!isTransientSqliteError(error)) throw error;
          await sleep(this.options.retryMaxDelayMs, undefined, { signal }).catch(() => undefined);
          continue;
        }
        if (!result.acquired) {
          // Another relay delivers; stand by, looking again now and then: the holder may stop (a zombie
          // ends when its retry opens the file) or die, and its lease is then free long before it expires.
          const wait = Math.min(STANDBY_CHECK_MS, this.options.leaseTtlMs / 2, Math.max(50, result.holder.expiresAt - this.options.now()));
          await sleep(wait, undefined, { signal }).catch(() => undefined);
          continue;
        }
        this.holding = true;
        this.lease.keepRenewed((error) => this.fail(error instanceof OnceboxError ? error : new OnceboxError('relay_failed', String(error))));
      }
      const windowSize = this.options.maxInFlight ?? RELAY_DEFAULTS.maxInFlight;
      const window = this.nextBatches(windowSize);
      if (window.length === 0) {
        await this.sleepUntilNotified();
        continue;
      }
      try {
        // A retry reads the pending rows again: some may have been settled meanwhile.
        await pRetry((attempt) => this.deliverWindow(attempt === 1 ? window : this.nextBatches(windowSize)), {
          retries: Number.POSITIVE_INFINITY,
          factor: 2,
          minTimeout: this.options.retryMinDelayMs,
          maxTimeout: this.options.retryMaxDelayMs,
          randomize: true,
          signal,
          shouldRetry: ({ error }) => error instanceof DeliveryError,
          onFailedAttempt: async ({ error }) => {
            if (!(error instanceof DeliveryError)) return;
            this.recordError(error);
            this.options.reporter?.deliveryFailed(error);
            if (error.details.status === 413 && this.maxRows > 1) this.maxRows = Math.max(1, Math.floor(this.maxRows / 2));
            const retryAfter = error.details.retryAfterMs;
            if (retryAfter !== undefined) await sleep(Math.min(retryAfter, 60_000), undefined, { signal }).catch(() => undefined);
          },
        });
      } catch (error) {
        if (signal.aborted) return;
        // The fenced attempt's rows are parked; the file may hold rows of other runs, which go on.
        if (error instanceof FencedError) {
          this.recordError(error);
          continue;
        }
        throw error;
      }
    }
  }

  private async sleepUntilNotified(): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return;
    }
    await new Promise<void>((resolve) => {
      this.wake = resolve;
    });
    this.woken = false;
  }

  /** The next pending rows of one stream, cut into at most `count` batches (see cutBatches). */
  private nextBatches(count: number): OutboxRow[][] {
    const limit = this.maxRows * count;
    const rows = this.file.rows.pending.all({ limit });
    return cutBatches(rows, { maxRows: this.maxRows, maxBytes: this.options.batchMaxBytes, count, more: rows.length === limit });
  }

  /**
   * Sends consecutive batches of one stream at once and applies their answers in order. A batch that
   * reached the server before the one ahead of it was stored is answered with a gap and marks nothing;
   * its rows are simply sent again, right away when the batches ahead made progress.
   * @returns how many rows it settled.
   */
  private async deliverWindow(batches: readonly OutboxRow[][]): Promise<number> {
    if (batches.length === 0) return 0;
    const windowStart = batches[0]![0]!.seq;
    // Every send is started before any answer is awaited, and every one is awaited, so none runs unobserved.
    const sends = batches.map((batch) => this.send(batch).then((answer) => ({ answer }), (error: unknown) => ({ error })));
    let settled = 0;
    let failure: { error: unknown } | undefined;
    for (const [index, sending] of sends.entries()) {
      const outcome = await sending;
      try {
        if ('error' in outcome) throw outcome.error;
        settled += this.apply(batches[index]!, outcome.answer, windowStart);
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure === undefined) return settled;
    const raced = failure.error instanceof DeliveryError && failure.error.code === 'sequence_gap' && settled > 0;
    if (raced) return settled;
    throw failure.error;
  }

  /**
   * Deletes delivered rows older than `pruneDeliveredAfterMs`, in bounded batches.
   * @returns how many rows it deleted.
   */
  prune(): number {
    const after = this.options.pruneDeliveredAfterMs;
    if (after === null || after === undefined) return 0;
    return this.delivered.pruneSettledBefore(this.options.now() - after);
  }

  /** Sends one batch: the stream it belongs to and the server's per-item results. */
  private async send(batch: readonly OutboxRow[]): Promise<{ stream: StreamIdentity; results: ItemResult[] }> {
    const first = batch[0]!;
    const stream = {
      producer: this.producer,
      workflow: first.workflow,
      runId: first.run_id,
      task: wireTask(first.task),
      attempt: first.attempt,
    };
    return { stream, results: await this.sendTraced(stream, batch) };
  }

  /** Marks the batch's rows with the server's answers, and says whether the relay goes on. */
  private apply(batch: readonly OutboxRow[], { stream, results }: { stream: StreamIdentity; results: ItemResult[] }, windowStart: number): number {
    this.options.reporter?.deliverySucceeded();
    if (this.lastError !== undefined) this.clearError();
    let applied: AppliedAnswers;
    try {
      // The failpoint sits where recording the answers can fail: one that throws SQLite's full-disk
      // error goes the way a real full disk goes.
      failpoint('relay:after-response');
      applied = this.file.withoutFsync(() => this.applyResults.immediate(batch, results));
    } catch (error) {
      if (!isTransientSqliteError(error)) throw error;
      // Not recorded, so the rows stay pending: the batch is sent again with the same keys, and the
      // server answers with the receipts it gave, once the file can be written.
      throw new DeliveryError(
        'local_storage',
        `${this.file.path}: could not record the server's answers (${error.code}: ${error.message}); the batch is sent again with the same keys once the file can be written`,
        {},
        { cause: error },
      );
    }
    if (applied.settled.length > 0) {
      this.options.onSettled?.(applied.settled);
      this.options.reporter?.settled(applied.settled);
    }
    if (applied.fence) this.options.reporter?.fenced({ runId: applied.fence.runId, attempt: applied.fence.attempt, by: applied.fence.by });
    this.delivered.pruneNowAndThen(this.options.pruneDeliveredAfterMs, this.options.now());
    return afterAnswers(stream, batch, results, applied, windowStart);
  }

  /** Sends one batch, inside a PRODUCER span when the application has OpenTelemetry (see sendInSpan). */
  private async sendTraced(stream: StreamIdentity, batch: readonly OutboxRow[]): Promise<ItemResult[]> {
    const body = encodeBatch(stream, batch);
    const runKeys = batchHeaders(batch);
    const send = (headers?: Record<string, string>) => this.options.client.sendEmissions(body, batch.length, this.stopper.signal, { ...runKeys, ...headers });
    return this.otel ? sendInSpan(this.otel, stream, batch, send) : send();
  }

  private releaseLease(): void {
    this.lease.stopRenewing();
    clearInterval(this.foreignWatch);
    if (this.holding) this.lease.release();
    this.holding = false;
  }

  private fail(error: OnceboxError): void {
    if (this.stopper.signal.aborted) return;
    this.failure = error;
    this.recordError(error, true);
    this.options.reporter?.stopped(error);
    this.options.onStopped?.(error);
    this.stopper.abort(error);
    this.notify();
    this.lease.stopRenewing();
    if (!(error instanceof LeaseLostError)) this.releaseLease();
    this.holding = false;
  }

  /** Delivery works again: the last error is history, and `status()` stops showing it. */
  private clearError(): void {
    this.lastError = undefined;
    try {
      this.file.meta.remove('relay_last_error');
    } catch {
      // Shown a little longer; the next delivery clears it again.
    }
  }

  private recordError(error: OnceboxError, stopped = false): void {
    this.lastError = recordRelayError(this.file, error, stopped, this.options.now());
  }
}

/**
 * @internal Writes a relay's error into its file, where `status()` and `oncebox status` read it, and
 * returns it. `stopped`: the relay ends on it rather than retrying.
 */
export function recordRelayError(file: OutboxFile, error: OnceboxError, stopped: boolean, now = Date.now()): RelayError {
  const recorded: RelayError = { code: error.code, message: error.message, at: new Date(now).toISOString(), ...(stopped ? { stopped: true } : {}) };
  try {
    file.meta.write('relay_last_error', recorded);
  } catch {
    // The caller still has the error; failing to persist it must not hide it.
  }
  return recorded;
}

/** The reason the relay's requests are aborted with when the outbox closes; never thrown to a caller. */
class OutboxStopped extends OnceboxError {
  constructor() {
    super(ProducerErrorCode.OutboxClosed, 'the outbox closed while a delivery was in flight; it is sent again when the outbox opens');
  }
}
