import { canonicalJson, payloadFingerprint } from '../../protocol/canonical-json.js';
import { EmissionValidationError } from '../../protocol/errors.js';
import { Limits } from '../../protocol/limits.js';
import type { HeldRow } from '../file/terminal-statements.js';
import type { OutboxFile } from '../file/outbox-file.js';
import { runKeyOf } from '../run.js';

/**
 * The checkpoint that mirrors a run's held emissions to the server. Held emissions live in the outbox
 * file until the run's terminal commit; a retry on a fresh machine resumes from the server's copy of
 * the run's checkpoints, and this one gives it back what the lost file held, so that its `complete`
 * releases them too. It is written in the commit that holds an emission, in stream order with it, and
 * emptied by the terminal commit.
 */
export const HELD_CHECKPOINT = 'oncebox.held';

interface MirroredHeld {
  /** Set on the emissions a failure for good discarded: held again by a run tried after all. */
  discarded?: true;
  key: string;
  scope: 'partition' | 'file';
  asset: string;
  partitionKey: string | null;
  partitionDate: string | null;
  extra: unknown;
  attempt: number;
}

/**
 * @internal The mirror of a run's held emissions, as canonical JSON; refused beyond what a checkpoint may
 * hold. After a failure for good (`discarded`), the emissions it discarded, so that a run tried after all
 * on a fresh machine holds them again.
 */
export function heldMirror(rows: readonly HeldRow[], discarded = false): string {
  const entries: MirroredHeld[] = rows.map((row) => ({
    ...(discarded ? { discarded: true as const } : {}),
    key: row.key,
    scope: row.key_scope,
    asset: row.asset,
    partitionKey: row.partition_key,
    partitionDate: row.partition_date,
    extra: row.extra === null ? null : JSON.parse(row.extra),
    attempt: row.attempt,
  }));
  const value = canonicalJson(entries);
  if (Buffer.byteLength(value) > Limits.maxExtraBytes) {
    throw new EmissionValidationError(
      'on',
      `on: the run holds ${rows.length} emissions for its success, ${Buffer.byteLength(value)} bytes as the server's copy, beyond the ${Limits.maxExtraBytes} a checkpoint may hold; complete the run in parts, or hold fewer (or smaller) emissions`,
    );
  }
  return value;
}

/**
 * @internal On a fresh file resumed from the server: the held emissions the mirror names, held again, so
 * that this attempt's `complete` releases them (with their keys) or its `fail` discards them. Those a
 * failure for good discarded are held again too: this attempt is the run tried after all.
 */
export function restoreHeld(file: OutboxFile, run: { runId: string; task?: string | undefined }, mirrored: unknown, now: number): number {
  if (!Array.isArray(mirrored)) return 0;
  const { task } = runKeyOf(run);
  if (file.terminal.heldOfRun.all({ runId: run.runId, task }).length > 0) return 0;
  for (const entry of mirrored as MirroredHeld[]) {
    const extra = entry.extra === null ? null : canonicalJson(entry.extra);
    file.terminal.hold.run({
      run_id: run.runId,
      task,
      attempt: entry.attempt,
      key: entry.key,
      key_scope: entry.scope,
      fingerprint: payloadFingerprint({ asset: entry.asset, partitionKey: entry.partitionKey, partitionDate: entry.partitionDate ?? undefined, extra: extra ?? undefined }),
      asset: entry.asset,
      partition_key: entry.partitionKey,
      partition_date: entry.partitionDate,
      extra,
      trace_context: null,
      committed_at: now,
    });
  }
  return mirrored.length;
}
