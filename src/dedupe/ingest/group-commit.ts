import { failpoint } from '../../failpoints/failpoints.js';
import type { ItemResult, StreamIdentity } from '../../protocol/wire.js';
import type { CheckedItem, InvalidItem } from '../item-check.js';
import type { IngestScope } from './steps.js';

/**
 * A request waiting for the next group commit: the requests that arrive while a store is busy share its
 * next transaction and its one fsync, each in a savepoint of its own (one that fails undoes only
 * itself), and each is answered only once that transaction is durable.
 * @internal
 */
export interface WaitingIngest {
  stream: StreamIdentity;
  items: readonly (CheckedItem | InvalidItem)[];
  scope: IngestScope;
  resolve(results: ItemResult[]): void;
  reject(error: unknown): void;
}

/** @internal What one request of a group came to: its answers, or what it threw (its savepoint undone). */
export type GroupOutcome = { results: ItemResult[] } | { error: unknown };

/**
 * @internal Answers each request of a group whose transaction has committed with its own outcome. The
 * failpoints sit between the commit and the answers, where a server killed loses nothing acknowledged.
 */
export function answerGroup(group: readonly WaitingIngest[], outcomes: readonly GroupOutcome[]): void {
  failpoint('ingest:after-commit');
  if (group.length > 1) failpoint('ingest:after-shared-commit');
  outcomes.forEach((outcome, i) => ('results' in outcome ? group[i]!.resolve(outcome.results) : group[i]!.reject(outcome.error)));
}
