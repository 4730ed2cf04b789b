import { NotCommittedError } from '../../protocol/errors.js';
import type { TraceContext } from '../../protocol/trace.js';
import type { Receipt } from '../../protocol/wire.js';

/** What a caller passes to `emit`: everything about the event but its asset. */
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

/** @internal An emission collected by a commit, as the row writer takes it. */
export interface PendingEmission {
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

/** @internal A stored event as the cause of an emission: its id (for the key) and cursor (for the lineage). */
export interface EmissionCause {
  eventId: string;
  cursor: number;
  /** Who emitted in response to the event, when not the consumer's handler itself (a trigger's firing). */
  scope: string | null;
}
