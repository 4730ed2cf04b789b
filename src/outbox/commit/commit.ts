import { z } from 'zod';
import type { Checkpoint } from '../../checkpoint/checkpoint.js';
import { canonicalJson } from '../../protocol/canonical-json.js';
import { describeFirstIssue, emissionPayloadSchema } from '../../protocol/emission.js';
import { CommitEndedError, EmissionValidationError, OnceboxError } from '../../protocol/errors.js';
import type { TraceContext } from '../../protocol/trace.js';
import type { Receipt } from '../../protocol/wire.js';
import { LifecycleAsset, MAX_FAILURE_CODE, MAX_FAILURE_MESSAGE, outcomeKey, type LifecycleExtra } from '../../protocol/lifecycle.js';
import { toPlainText } from '../../protocol/text.js';
import type { OutboxFile } from '../file/outbox-file.js';
import { runKeyOf, wireTask, type RunContext } from '../run.js';
import { Emission, type EmissionCause, type EmissionInput, type PendingEmission } from './emission.js';
import { HELD_CHECKPOINT, heldMirror } from './held-mirror.js';
import { RowWriter } from './row-writer.js';

const EMISSION_FIELDS = ['partitionKey', 'partitionDate', 'extra', 'key', 'on'];
const userKeySchema = z.string().min(1, { error: 'must not be empty' }).max(200, { error: 'must be at most 200 characters' });

/** @internal What a terminal commit records: the attempt's outcome, and for a failure its reason. */
export type Terminal = { outcome: 'succeeded' } | { outcome: 'failed'; error: { message: string; code?: string }; willRetry: boolean };

/**
 * @internal Why an attempt failed, as its failure event carries it: the message, and the error's code.
 * Whatever the error holds, the failure is recorded: both are cut to what the server takes, and made
 * plain text (a NUL or half an emoji in a message must not make `box.fail` throw, and the failure lost).
 */
export function describeFailure(error: unknown): { message: string; code?: string } {
  const message = toPlainText(error instanceof Error ? error.message : String(error), MAX_FAILURE_MESSAGE);
  const code = error instanceof OnceboxError ? error.code : (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? { message, code: toPlainText(code, MAX_FAILURE_CODE) } : { message };
}

/** @internal Everything the outbox hands a commit. */
export interface CommitContext {
  file: OutboxFile;
  producer: string;
  run: RunContext;
  payloadSchema: ReturnType<typeof emissionPayloadSchema>;
  waitFor: (emission: Emission) => Promise<Receipt>;
  /** The trace context an emission is committed in, to travel with it; undefined without OpenTelemetry. */
  traceContext: () => TraceContext | undefined;
}

/**
 * The `tx` of `commit((tx) => …)`. It collects checkpoint writes and emissions while the callback
 * runs, validating each one at once, and writes them all when the callback returns, inside the same
 * SQLite transaction.
 */
export class CommitTransaction {
  private readonly emissions: PendingEmission[] = [];
  private readonly checkpoints = new Map<string, string>();
  private open = true;
  private terminal: Terminal | undefined;

  /** @internal */
  constructor(private readonly context: CommitContext) {}

  /** Sets a checkpoint to a value that its schema accepts; the last set of a name in a commit wins. */
  set<T>(checkpoint: Checkpoint<T>, value: T): void {
    this.assertOpen('set');
    this.checkpoints.set(checkpoint.name, checkpoint.encode(value));
  }

  /** Adds an emission of `asset` to this commit. */
  emit(asset: { readonly name: string }, input: EmissionInput = {}): Emission {
    return this.add(asset, input, undefined);
  }

  /**
   * @internal Adds an emission made in response to a consumed event. Its key derives from that event's
   * id instead of the run's, so a consumer that processes the event again after a crash, on this file
   * or a fresh one, derives the same key.
   */
  emitCaused(asset: { readonly name: string }, input: EmissionInput, cause: EmissionCause): Emission {
    return this.add(asset, input, cause);
  }

  private add(asset: { readonly name: string }, input: EmissionInput, cause: EmissionCause | undefined): Emission {
    this.assertOpen('emit');
    const { key, on, ...payload } = checkShape(input);
    if (on !== undefined && on !== 'success') {
      throw new EmissionValidationError('on', `on: must be 'success' (held until box.complete) or left out (got ${JSON.stringify(on)})`);
    }
    if (on !== undefined && cause !== undefined) {
      throw new EmissionValidationError('on', "on: a consumer's emission responds to its event and cannot wait for a run's success; leave it out");
    }
    const candidate = { ...payload, asset: asset.name };
    const parsed = this.context.payloadSchema.safeParse(candidate);
    if (!parsed.success) {
      const { field, message } = describeFirstIssue(parsed.error, { input: candidate, knownKeys: EMISSION_FIELDS });
      throw new EmissionValidationError(field, message);
    }
    let userKey: string | undefined;
    if (key !== undefined) {
      const checked = userKeySchema.safeParse(key);
      if (!checked.success) {
        throw new EmissionValidationError('key', describeFirstIssue(checked.error, { input: key, prefix: 'key' }).message);
      }
      userKey = checked.data;
    }
    const handle = new Emission(asset.name, parsed.data.partitionKey, this.context.waitFor);
    this.emissions.push({ handle, partitionDate: parsed.data.partitionDate, extra: parsed.data.extra, userKey, trace: this.context.traceContext(), cause, held: on === 'success' });
    return handle;
  }

  /** @internal Makes this commit the attempt's terminal one: see `releaseOrDiscard`. */
  endRun(terminal: Terminal): void {
    this.terminal = terminal;
  }

  /**
   * @internal The terminal commit's part, before its rows are written: a success releases the run's
   * held emissions into the outbox with their keys, a failure discards them; either adds the lifecycle
   * event. Returns what to record once the rows are written.
   */
  private releaseOrDiscard(terminal: Terminal, now: number): () => void {
    const { file, producer, run, waitFor } = this.context;
    const runKey = runKeyOf(run);
    const held = file.terminal.heldOfRun.all(runKey);
    const succeeded = terminal.outcome === 'succeeded';
    // A failure with a retry to come leaves the held emissions for the attempt that succeeds.
    const keepsHeld = terminal.outcome === 'failed' && terminal.willRetry;
    if (succeeded) {
      for (const row of held) {
        this.emissions.push({
          handle: new Emission(row.asset, row.partition_key ?? undefined, waitFor),
          partitionDate: row.partition_date ?? undefined,
          extra: row.extra ?? undefined,
          userKey: undefined,
          trace: row.trace_context === null ? undefined : (JSON.parse(row.trace_context) as TraceContext),
          cause: undefined,
          held: false,
          preset: { key: row.key, scope: row.key_scope },
        });
      }
    }
    // A success is one event per run, whichever attempt makes it, so its extra names no attempt.
    const extra: LifecycleExtra = succeeded
      ? { outcome: 'succeeded', workflow: run.workflow, runId: run.runId, task: wireTask(run.task) }
      : { outcome: 'failed', workflow: run.workflow, runId: run.runId, task: wireTask(run.task), attempt: run.attempt, error: terminal.error, willRetry: terminal.willRetry, held: held.length };
    this.addLifecycleEvent(succeeded ? LifecycleAsset.Succeeded : LifecycleAsset.Failed, extra, outcomeKey(producer, run, terminal.outcome, run.attempt));
    return () => {
      if (!keepsHeld) file.terminal.settleHeld.run({ ...runKey, state: succeeded ? 'released' : 'discarded', now, reason: succeeded ? null : terminal.error.message });
      file.terminal.recordOutcome.run({ ...runKey, attempt: run.attempt, outcome: terminal.outcome, reason: succeeded ? null : terminal.error.message, now });
    };
  }

  /** @internal The terminal commit's lifecycle event. */
  lifecycleEvent: Emission | undefined;

  /**
   * @internal Records that `attempt` of this run, which wrote to this file and never ended, was
   * superseded by this one: an `oncebox.run_fenced` event, once per fenced attempt.
   */
  noteFenced(attempt: number): void {
    const { producer, run } = this.context;
    const extra: LifecycleExtra = { outcome: 'fenced', workflow: run.workflow, runId: run.runId, task: wireTask(run.task), attempt, fencedBy: run.attempt };
    this.addLifecycleEvent(LifecycleAsset.Fenced, extra, outcomeKey(producer, run, 'fenced', attempt));
  }

  /** A lifecycle event of this run, with its key fixed by what it records. */
  private addLifecycleEvent(asset: LifecycleAsset, extra: LifecycleExtra, key: string): void {
    this.lifecycleEvent = new Emission(asset, undefined, this.context.waitFor);
    this.emissions.push({
      handle: this.lifecycleEvent,
      partitionDate: undefined,
      extra: canonicalJson(extra),
      userKey: undefined,
      trace: this.context.traceContext(),
      cause: undefined,
      held: false,
      preset: { key, scope: 'file' },
    });
  }

  /**
   * @internal Writes the collected state; runs inside the commit's SQLite transaction, with a terminal
   * commit's part (releasing or discarding held emissions) around the rows.
   */
  write(now: number): void {
    this.open = false;
    const { file, producer, run } = this.context;
    const writer = new RowWriter(file, producer, run, this.checkpoints, now);
    writer.saveCheckpoints(this.checkpoints);
    // What a failure for good discards, read before it is marked: the server's copy keeps it, discarded.
    const failsForGood = this.terminal?.outcome === 'failed' && !this.terminal.willRetry;
    const discarding = failsForGood ? file.terminal.heldOfRun.all(runKeyOf(run)) : [];
    const recordTerminal = this.terminal === undefined ? undefined : this.releaseOrDiscard(this.terminal, now);
    let heldWritten = false;
    for (const emission of this.emissions) {
      if (writer.write(emission) === 'held') heldWritten = true;
    }
    recordTerminal?.();
    // The server's copy of what the run holds, for a retry on a fresh machine: see HELD_CHECKPOINT.
    const settlesHeld = this.terminal !== undefined && !(this.terminal.outcome === 'failed' && this.terminal.willRetry);
    if (heldWritten || settlesHeld) {
      const value = failsForGood ? heldMirror(discarding, true) : settlesHeld ? '[]' : heldMirror(file.terminal.heldOfRun.all(runKeyOf(run)));
      writer.saveCheckpoints(new Map([[HELD_CHECKPOINT, value]]));
      this.checkpoints.set(HELD_CHECKPOINT, value);
    }
    // The server's copy of what the run holds goes first among the commit's checkpoint updates: a server
    // that has taken any checkpoint of this commit (the run's progress) has taken what it holds too,
    // wherever the relay cuts its requests, so that a retry on a fresh machine that resumes past this
    // commit holds its emissions again.
    const updates = this.checkpoints.has(HELD_CHECKPOINT) ? new Map([[HELD_CHECKPOINT, this.checkpoints.get(HELD_CHECKPOINT)!], ...this.checkpoints]) : this.checkpoints;
    writer.appendCheckpointUpdates(updates, { mayRewrite: this.emissions.length === 0 });
  }

  /** @internal Called once the SQLite transaction has committed. */
  committed(): readonly Emission[] {
    const handles = this.emissions.map((emission) => emission.handle);
    for (const handle of handles) handle.committed = true;
    return handles;
  }

  get emissionCount(): number {
    return this.emissions.length;
  }

  /** Whether the commit gave the relay anything to deliver: an emission or a checkpoint update. */
  get wroteRows(): boolean {
    return this.emissions.length > 0 || this.checkpoints.size > 0;
  }

  private assertOpen(method: string): void {
    if (!this.open) {
      throw new CommitEndedError(`tx.${method}(): this commit has already ended; use tx only inside the commit callback`);
    }
  }
}

function checkShape(input: EmissionInput): EmissionInput {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw new EmissionValidationError('emission', 'emission: must be an object such as { partitionKey: "batch-0042" }');
  }
  if (Object.hasOwn(input, 'asset')) {
    throw new EmissionValidationError('asset', 'asset: unknown field here; the asset is the one emit() is called on (box.asset(name))');
  }
  return input;
}
