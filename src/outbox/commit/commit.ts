import { z } from 'zod';
import type { Checkpoint } from '../../checkpoint/checkpoint.js';
import { canonicalJson, payloadFingerprint } from '../../protocol/canonical-json.js';
import { describeFirstIssue, emissionPayloadSchema } from '../../protocol/emission.js';
import { CommitEndedError, EmissionValidationError, KeyConflictError, NotCommittedError } from '../../protocol/errors.js';
import type { TraceContext } from '../../protocol/trace.js';
import type { Receipt } from '../../protocol/wire.js';
import { LifecycleAsset, type LifecycleExtra } from '../../protocol/lifecycle.js';
import { HELD_CHECKPOINT, heldMirror } from './held-mirror.js';
import { causedKey, checkpointKey, deriveKey, explicitKey, outcomeKey } from './keys.js';
import type { OutboxFile, OutboxRow } from '../file/outbox-file.js';
import type { RunContext } from '../run.js';

/** What a caller passes to `emit`: everything about the event but its asset. */
/** What a checkpoint row holds in place of a payload fingerprint, which nothing reads for it. */
const CHECKPOINT_FINGERPRINT = 'checkpoint';

export interface EmissionInput {
  /** Which unit of data the event announces, e.g. "batch-0042". */
  partitionKey?: string;
  /** ISO 8601 with an explicit offset or Z; requires partitionKey. */
  partitionDate?: string;
  /** Small JSON metadata: references, never secrets or whole logs. 64 KiB at most by default. */
  extra?: Record<string, unknown>;
  /**
   * Your own idempotency key, instead of the one derived from producer, run, asset and partition. A
   * re-run must give the same key for the same logical emission.
   */
  key?: string;
  /**
   * 'success' holds the emission in the outbox until the run succeeds: `box.complete` releases it, in its
   * own transaction, and `box.fail` discards it (recorded in the file, counted in `status().discarded`).
   * Its key is the key it would have had: a retry that holds it again releases one copy.
   */
  on?: 'success';
}

const EMISSION_FIELDS = ['partitionKey', 'partitionDate', 'extra', 'key', 'on'];
const userKeySchema = z.string().min(1, { error: 'must not be empty' }).max(200, { error: 'must be at most 200 characters' });

/** A handle on one emission of a commit. */
export class Emission {
  /** @internal */ rowId: number | undefined;
  /** @internal */ recommitted = false;
  /** @internal */ committed = false;
  /** @internal */ idempotencyKey: string | undefined;

  /** @internal */
  constructor(
    readonly asset: string,
    readonly partitionKey: string | undefined,
    private readonly waitFor: (emission: Emission) => Promise<Receipt>,
  ) {}

  /** The idempotency key, known once the commit has returned. */
  get key(): string {
    if (!this.committed) throw new NotCommittedError('emission.key: the commit has not returned yet; read the key after commit() returns');
    return this.idempotencyKey!;
  }

  /**
   * The server's receipt, once the relay has delivered this emission. Rejects with RejectedError when
   * the server refused it for good (the row is parked as dead).
   */
  receipt(): Promise<Receipt> {
    if (!this.committed) {
      return Promise.reject(new NotCommittedError('emission.receipt(): call it after commit() has returned'));
    }
    return this.waitFor(this);
  }
}

interface PendingEmission {
  handle: Emission;
  partitionDate: string | undefined;
  /** Canonical JSON text. */
  extra: string | undefined;
  userKey: string | undefined;
  trace: TraceContext | undefined;
  /** The consumed event this emission responds to; its key derives from that event's id. */
  cause: EmissionCause | undefined;
  /** Held for the run's success (`on: 'success'`): written to the held table, not the outbox. */
  held: boolean;
  /** A key fixed before this commit: a held emission's, released, or a lifecycle event's. */
  preset?: { key: string; scope: 'partition' | 'file' };
}

/** @internal What a terminal commit records: the attempt's outcome, and for a failure its reason. */
export type Terminal = { outcome: 'succeeded' } | { outcome: 'failed'; error: { message: string; code?: string }; willRetry: boolean };

/** @internal A stored event as the cause of an emission: its id (for the key) and cursor (for the lineage). */
export interface EmissionCause {
  eventId: string;
  cursor: number;
  /** Who emitted in response to the event, when not the consumer's handler itself (a trigger's firing). */
  scope: string | null;
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
    const runKey = { runId: run.runId, task: run.task ?? '' };
    const held = file.lifecycle.heldOfRun.all(runKey);
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
      ? { outcome: 'succeeded', workflow: run.workflow, runId: run.runId, task: run.task ?? null }
      : { outcome: 'failed', workflow: run.workflow, runId: run.runId, task: run.task ?? null, attempt: run.attempt, error: terminal.error, willRetry: terminal.willRetry, held: held.length };
    this.addLifecycleEvent(succeeded ? LifecycleAsset.Succeeded : LifecycleAsset.Failed, extra, outcomeKey(producer, run, terminal.outcome, run.attempt));
    return () => {
      if (!keepsHeld) file.lifecycle.settleHeld.run({ ...runKey, state: succeeded ? 'released' : 'discarded', now, reason: succeeded ? null : terminal.error.message });
      file.lifecycle.recordOutcome.run({ ...runKey, attempt: run.attempt, outcome: terminal.outcome, reason: succeeded ? null : terminal.error.message, now });
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
    const extra: LifecycleExtra = { outcome: 'fenced', workflow: run.workflow, runId: run.runId, task: run.task ?? null, attempt, fencedBy: run.attempt };
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
   * @internal Writes the collected state; runs inside the commit's SQLite transaction. The stream's next
   * sequence number is read here, under the write lock, not remembered between commits: the rows of this
   * attempt may have been written by another process on the same file.
   */
  write(now: number): void {
    this.open = false;
    const { file, producer, run } = this.context;
    const s = file.rows;
    // max() always returns one row; its value is null while the stream has none.
    const task = run.task ?? '';
    let nextSeq = (s.lastSeq.get({ runId: run.runId, task, attempt: run.attempt })!.last ?? 0) + 1;
    for (const [name, value] of this.checkpoints) file.checkpoints.setCheckpoint.run({ runId: run.runId, task, name, value, now });
    // Needed only by an emission without a partition key, so computed only for one.
    let position: string | null | undefined;
    const positionOfCommit = () => (position ??= this.checkpoints.size === 0 ? null : canonicalJson(Object.fromEntries(this.checkpoints)));
    const occurrences = new Map<string, number>();
    // What a failure for good discards, read before it is marked: the server's copy keeps it, discarded.
    const failsForGood = this.terminal?.outcome === 'failed' && !this.terminal.willRetry;
    const discarding = failsForGood ? file.lifecycle.heldOfRun.all({ runId: run.runId, task }) : [];
    const recordTerminal = this.terminal === undefined ? undefined : this.releaseOrDiscard(this.terminal, now);
    let heldWritten = false;
    for (const emission of this.emissions) {
      const { handle } = emission;
      const partitionKey = handle.partitionKey ?? null;
      const slot = JSON.stringify([handle.asset, partitionKey, emission.cause?.eventId ?? null, emission.cause?.scope ?? null]);
      const occurrence = occurrences.get(slot) ?? 0;
      occurrences.set(slot, occurrence + 1);
      const key =
        emission.preset !== undefined
          ? emission.preset.key
          : emission.userKey !== undefined
          ? explicitKey(producer, emission.userKey)
          : emission.cause !== undefined
            ? causedKey({ producer, cause: emission.cause, asset: handle.asset, partitionKey, occurrence })
            : deriveKey({
              producer,
              workflow: run.workflow,
              runId: run.runId,
              task: run.task ?? null,
              asset: handle.asset,
              partitionKey,
              position: partitionKey === null ? positionOfCommit() : null,
              occurrence,
            });
      const fingerprint = payloadFingerprint({
        asset: handle.asset,
        partitionKey,
        partitionDate: emission.partitionDate,
        extra: emission.extra,
      });
      // A key derived from a run's partition is unique among that partition's rows; any other in the whole file.
      const byPartition = emission.preset !== undefined ? emission.preset.scope === 'partition' : emission.userKey === undefined && emission.cause === undefined && partitionKey !== null;
      if (emission.held) {
        file.lifecycle.hold.run({
          run_id: run.runId,
          task,
          attempt: run.attempt,
          key,
          key_scope: byPartition ? 'partition' : 'file',
          fingerprint,
          asset: handle.asset,
          partition_key: partitionKey,
          partition_date: emission.partitionDate ?? null,
          extra: emission.extra ?? null,
          trace_context: emission.trace === undefined ? null : JSON.stringify(emission.trace),
          committed_at: now,
        });
        handle.idempotencyKey = key;
        heldWritten = true;
        continue;
      }
      const insert = byPartition ? s.insertPartitionRow : s.insertFileRow;
      const inserted = insert.run({
        key,
        keyScope: byPartition ? 'partition' : 'file',
        fingerprint,
        workflow: run.workflow,
        runId: run.runId,
        task,
        attempt: run.attempt,
        seq: nextSeq,
        kind: 'event',
        asset: handle.asset,
        partitionKey,
        partitionDate: emission.partitionDate ?? null,
        extra: emission.extra ?? null,
        committedAt: now,
        checkpointName: null,
        checkpointValue: null,
        // Stryker disable next-line ConditionalExpression: better-sqlite3 binds undefined as NULL too
        traceContext: emission.trace === undefined ? null : JSON.stringify(emission.trace),
        causeCursor: emission.cause?.cursor ?? null,
      });
      handle.idempotencyKey = key;
      if (inserted.changes === 1) {
        handle.rowId = Number(inserted.lastInsertRowid);
        nextSeq++;
        continue;
      }
      const existing = byPartition
        ? s.rowByPartitionKey.get({ runId: run.runId, task, asset: handle.asset, partitionKey: partitionKey!, key })!
        : s.rowByFileKey.get({ key })!;
      if (existing.fingerprint !== fingerprint) throw keyConflict(existing, handle, emission.userKey);
      // The same emission was committed before (a re-run of a batch): it keeps its one row and event.
      handle.rowId = existing.id;
      handle.recommitted = true;
    }
    recordTerminal?.();
    // The server's copy of what the run holds, for a retry on a fresh machine: see HELD_CHECKPOINT.
    const settlesHeld = this.terminal !== undefined && !(this.terminal.outcome === 'failed' && this.terminal.willRetry);
    if (heldWritten || settlesHeld) {
      const value = failsForGood ? heldMirror(discarding, true) : settlesHeld ? '[]' : heldMirror(file.lifecycle.heldOfRun.all({ runId: run.runId, task }));
      file.checkpoints.setCheckpoint.run({ runId: run.runId, task, name: HELD_CHECKPOINT, value, now });
      this.checkpoints.set(HELD_CHECKPOINT, value);
    }
    // Checkpoint updates follow the commit's emissions in the stream, so the server's copy of a
    // checkpoint is applied only after the events it accounts for. A commit without emissions rewrites
    // the stream's waiting update of the same checkpoint when no emission follows it: the newest wins.
    for (const [name, value] of this.checkpoints) {
      // The query alone would find nothing to rewrite after this commit's new emissions; this saves it.
      // Stryker disable next-line ConditionalExpression: the query finds no update without an emission after it
      if (this.emissions.length === 0) {
        const waiting = s.coalescibleCheckpoint.get({ runId: run.runId, task, attempt: run.attempt, name });
        if (waiting && s.reviseCheckpointRow.run({ id: waiting.id, value }).changes === 1) continue;
      }
      s.insertStreamRow.run({
        key: checkpointKey(producer, run, nextSeq),
        keyScope: 'stream',
        // Never compared: a checkpoint row's key is its stream position, new in every commit.
        fingerprint: CHECKPOINT_FINGERPRINT,
        workflow: run.workflow,
        runId: run.runId,
        task,
        attempt: run.attempt,
        seq: nextSeq,
        kind: 'checkpoint',
        asset: '',
        partitionKey: null,
        partitionDate: null,
        extra: null,
        committedAt: now,
        checkpointName: name,
        checkpointValue: value,
        traceContext: null,
        causeCursor: null,
      });
      nextSeq++;
    }
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

function keyConflict(existing: OutboxRow, handle: Emission, userKey: string | undefined): KeyConflictError {
  const what = userKey !== undefined
    ? `key "${userKey}"`
    : `asset "${handle.asset}"${handle.partitionKey === undefined ? '' : ` partition "${handle.partitionKey}"`}`;
  return new KeyConflictError(
    existing.key,
    `${what} was committed before with a different payload (outbox row ${existing.id}, ` +
      `committed ${new Date(existing.committed_at).toISOString()}). A re-run must emit the same partitionDate and extra ` +
      'for the same emission; if this is a different event, give it its own partition key or an explicit key.',
  );
}
