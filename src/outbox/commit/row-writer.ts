import { canonicalJson, payloadFingerprint } from '../../protocol/canonical-json.js';
import { KeyConflictError } from '../../protocol/errors.js';
import type { OutboxFile } from '../file/outbox-file.js';
import { nextSeq } from '../file/rows.js';
import type { OutboxRow } from '../file/schema.js';
import { runKeyOf, wireTask, type RunContext } from '../run.js';
import type { Emission, PendingEmission } from './emission.js';
import { causedKey, checkpointKey, deriveKey, explicitKey } from './keys.js';

/** What a checkpoint row holds in place of a payload fingerprint, which nothing reads for it. */
const CHECKPOINT_FINGERPRINT = 'checkpoint';

/**
 * @internal Writes one commit's collected emissions and checkpoint updates into the outbox file, inside
 * the commit's SQLite transaction. The stream's next sequence number is read here, under the write
 * lock, not remembered between commits: the rows of this attempt may have been written by another
 * process on the same file.
 */
export class RowWriter {
  private readonly task: string;
  private nextSeq: number;
  /** How often each (asset, partition, cause) came up in this commit: the second of a kind gets a key of its own. */
  private readonly occurrences = new Map<string, number>();
  /** The commit's checkpoints as canonical JSON: the position of an emission without a partition key. */
  private position: string | null | undefined;

  /** @param checkpointsOfCommit the checkpoints the commit sets, which place an emission without a partition key. */
  constructor(
    private readonly file: OutboxFile,
    private readonly producer: string,
    private readonly run: RunContext,
    private readonly checkpointsOfCommit: ReadonlyMap<string, string>,
    private readonly now: number,
  ) {
    this.task = runKeyOf(run).task;
    this.nextSeq = nextSeq(file.rows, { runId: run.runId, task: this.task, attempt: run.attempt });
  }

  /** Sets the file's copy of the run's checkpoints, which the job reads back on resume. */
  saveCheckpoints(checkpoints: ReadonlyMap<string, string>): void {
    for (const [name, value] of checkpoints) this.file.checkpoints.setCheckpoint.run({ runId: this.run.runId, task: this.task, name, value, now: this.now });
  }

  /**
   * Writes one emission: a held one into the held table, any other as an outbox row, or, when the
   * same emission was committed before (a re-run of a batch), onto its one row. A key committed before
   * with another payload is refused.
   */
  write(emission: PendingEmission): 'held' | 'written' {
    const { handle } = emission;
    const partitionKey = handle.partitionKey ?? null;
    const key = this.keyOf(emission, partitionKey);
    const fingerprint = payloadFingerprint({ asset: handle.asset, partitionKey, partitionDate: emission.partitionDate, extra: emission.extra });
    // A key derived from a run's partition is unique among that partition's rows; any other in the whole file.
    // Stryker disable next-line ConditionalExpression,EqualityOperator,StringLiteral: one answer here decides both where a key is written and where it is looked for, and a derived key names its partition, so only the pages written differ (the commit benchmark shows it); every key sent to the partition index is caught by commit.test.ts (checked by hand: Stryker's per-test coverage misses it)
    const byPartition = emission.preset !== undefined ? emission.preset.scope === 'partition' : emission.userKey === undefined && emission.cause === undefined && partitionKey !== null;
    handle.idempotencyKey = key;
    if (emission.held) {
      this.hold(emission, key, byPartition, fingerprint);
      return 'held';
    }
    const s = this.file.rows;
    const insert = byPartition ? s.insertPartitionRow : s.insertFileRow;
    const inserted = insert.run({
      key,
      keyScope: byPartition ? 'partition' : 'file',
      fingerprint,
      workflow: this.run.workflow,
      runId: this.run.runId,
      task: this.task,
      attempt: this.run.attempt,
      seq: this.nextSeq,
      kind: 'event',
      asset: handle.asset,
      partitionKey,
      partitionDate: emission.partitionDate ?? null,
      extra: emission.extra ?? null,
      committedAt: this.now,
      checkpointName: null,
      checkpointValue: null,
      // Stryker disable next-line ConditionalExpression: better-sqlite3 binds undefined as NULL too
      traceContext: emission.trace === undefined ? null : JSON.stringify(emission.trace),
      causeCursor: emission.cause?.cursor ?? null,
    });
    if (inserted.changes === 1) {
      handle.rowId = Number(inserted.lastInsertRowid);
      this.nextSeq++;
      // Stryker disable next-line StringLiteral: the caller tells a held emission from the rest, whatever this says
      return 'written';
    }
    const existing = byPartition
      ? s.rowByPartitionKey.get({ runId: this.run.runId, task: this.task, asset: handle.asset, partitionKey: partitionKey!, key })!
      : s.rowByFileKey.get({ key })!;
    if (existing.fingerprint !== fingerprint) throw keyConflict(existing, handle, emission.userKey);
    // The same emission was committed before (a re-run of a batch): it keeps its one row and event.
    handle.rowId = existing.id;
    handle.recommitted = true;
    // Stryker disable next-line StringLiteral: the caller tells a held emission from the rest, whatever this says
    return 'written';
  }

  /**
   * Checkpoint updates follow the commit's emissions in the stream, so the server's copy of a
   * checkpoint is applied only after the events it accounts for. A commit without emissions
   * (`mayRewrite`) rewrites the stream's waiting update of the same checkpoint when no emission follows
   * it: the newest wins.
   */
  appendCheckpointUpdates(checkpoints: ReadonlyMap<string, string>, { mayRewrite }: { mayRewrite: boolean }): void {
    const s = this.file.rows;
    for (const [name, value] of checkpoints) {
      // The query alone would find nothing to rewrite after this commit's new emissions; this saves it.
      // Stryker disable next-line ConditionalExpression: the query finds no update without an emission after it
      if (mayRewrite) {
        const waiting = s.coalescibleCheckpoint.get({ runId: this.run.runId, task: this.task, attempt: this.run.attempt, name });
        if (waiting && s.reviseCheckpointRow.run({ id: waiting.id, value }).changes === 1) continue;
      }
      s.insertStreamRow.run({
        key: checkpointKey(this.producer, this.run, this.nextSeq),
        keyScope: 'stream',
        // Never compared: a checkpoint row's key is its stream position, new in every commit.
        fingerprint: CHECKPOINT_FINGERPRINT,
        workflow: this.run.workflow,
        runId: this.run.runId,
        task: this.task,
        attempt: this.run.attempt,
        seq: this.nextSeq,
        kind: 'checkpoint',
        asset: '',
        partitionKey: null,
        partitionDate: null,
        extra: null,
        committedAt: this.now,
        checkpointName: name,
        checkpointValue: value,
        traceContext: null,
        causeCursor: null,
      });
      this.nextSeq++;
    }
  }

  /** The emission's idempotency key: fixed before the commit, the user's, its cause's, or derived from the run. */
  private keyOf(emission: PendingEmission, partitionKey: string | null): string {
    const { handle, cause } = emission;
    const slot = JSON.stringify([handle.asset, partitionKey, cause?.eventId ?? null, cause?.scope ?? null]);
    const occurrence = this.occurrences.get(slot) ?? 0;
    this.occurrences.set(slot, occurrence + 1);
    if (emission.preset !== undefined) return emission.preset.key;
    if (emission.userKey !== undefined) return explicitKey(this.producer, emission.userKey);
    if (cause !== undefined) return causedKey({ producer: this.producer, cause, asset: handle.asset, partitionKey, occurrence });
    return deriveKey({
      producer: this.producer,
      workflow: this.run.workflow,
      runId: this.run.runId,
      task: wireTask(this.run.task),
      asset: handle.asset,
      partitionKey,
      position: partitionKey === null ? this.positionOfCommit() : null,
      occurrence,
    });
  }

  /** Needed only by an emission without a partition key, so computed only for one. */
  private positionOfCommit(): string | null {
    return (this.position ??= this.checkpointsOfCommit.size === 0 ? null : canonicalJson(Object.fromEntries(this.checkpointsOfCommit)));
  }

  private hold(emission: PendingEmission, key: string, byPartition: boolean, fingerprint: string): void {
    const { handle } = emission;
    this.file.terminal.hold.run({
      run_id: this.run.runId,
      task: this.task,
      attempt: this.run.attempt,
      key,
      key_scope: byPartition ? 'partition' : 'file',
      fingerprint,
      asset: handle.asset,
      partition_key: handle.partitionKey ?? null,
      partition_date: emission.partitionDate ?? null,
      extra: emission.extra ?? null,
      // Stryker disable next-line ConditionalExpression: better-sqlite3 binds undefined as NULL too
      trace_context: emission.trace === undefined ? null : JSON.stringify(emission.trace),
      committed_at: this.now,
    });
  }
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
