import { uuidOf } from '../../protocol/keys.js';
import { wireTask } from '../run.js';

export { ONCEBOX_KEY_NAMESPACE } from '../../protocol/keys.js';

/** What identifies one logical emission, independently of when or where it was committed. */
export interface EmissionIdentity {
  producer: string;
  workflow: string;
  runId: string;
  task: string | null;
  asset: string;
  partitionKey: string | null;
  /**
   * Where in the job the emission was made, for an emission with no partition key: the checkpoint
   * values written in the same commit, as canonical JSON, or null when the commit writes none.
   */
  position: string | null;
  /** 0 for the first emission of this asset and partition in its commit, 1 for the next, and so on. */
  occurrence: number;
}

/**
 * The idempotency key of an emission: a UUIDv5 of its identity. The attempt is left out on purpose, so
 * that a retry re-processing the same batch derives the same key and the server answers with the
 * original receipt.
 */
export function deriveKey(identity: EmissionIdentity): string {
  return uuidOf([
      'oncebox/v1',
      identity.producer,
      identity.workflow,
      identity.runId,
      identity.task,
      identity.asset,
      identity.partitionKey,
      identity.position,
      identity.occurrence,
    ]);
}

/**
 * The key of an emission whose caller gave its own key. Scoped by producer, so that two producers that
 * happen to pick the same key do not swallow each other's events.
 */
export function explicitKey(producer: string, userKey: string): string {
  return uuidOf(['oncebox/v1/explicit', producer, userKey]);
}

/**
 * The key of an emission a consumer makes in response to a stored event: from that event's id (unique on
 * the server), so that processing the event again, after a crash or on a fresh machine, derives the same
 * key whatever attempt or file does it.
 */
export function causedKey(identity: {
  producer: string;
  cause: { eventId: string; scope: string | null };
  asset: string;
  partitionKey: string | null;
  occurrence: number;
}): string {
  const { producer, cause, asset, partitionKey, occurrence } = identity;
  return uuidOf(['oncebox/v1/caused', producer, cause.eventId, cause.scope, asset, partitionKey, occurrence]);
}

/**
 * The key of a checkpoint update: its stream position. Checkpoint updates are not deduplicated across
 * attempts (a retry's progress is new progress); the key only makes a resend of the same row idempotent.
 */
export function checkpointKey(
  producer: string,
  run: { workflow: string; runId: string; task?: string | undefined; attempt: number },
  seq: number,
): string {
  return uuidOf(['oncebox/v1/checkpoint', producer, run.workflow, run.runId, wireTask(run.task), run.attempt, seq]);
}
