import type Database from 'better-sqlite3';
import type { CommitTransaction } from '../outbox/commit/commit.js';
import type { Emission, EmissionInput } from '../outbox/commit/emission.js';
import type { Outbox } from '../outbox/outbox.js';
import { CommitEndedError, OptionsError } from '../protocol/errors.js';
import type { StoredEvent } from '../protocol/wire.js';

/** Options of one emission made in response to consumed events. */
export interface CausedEmitOptions {
  /**
   * The consumed event this emission responds to. Required when the handler got a batch of several
   * events; it defaults to the one event otherwise (and to the event that completed a trigger).
   */
  cause?: StoredEvent | undefined;
}

/**
 * The `tx` of a consumer's `ctx.commit((tx) => …)`, and of a trigger: one SQLite transaction that also
 * advances the cursor and marks the events processed. Writes through `tx.db` and emissions through
 * `tx.emit` commit with them, or not at all.
 */
export class ConsumeTransaction {
  private open = true;

  /** @internal */
  constructor(
    private readonly commit: CommitTransaction,
    private readonly box: Outbox,
    private readonly events: readonly StoredEvent[],
    /** Who emits, when not the handler: a trigger's firing, part of each emission's key. */
    private readonly scope: string | null,
  ) {}

  /**
   * The consumer's SQLite file, inside this transaction: keep the state your handler builds in your own
   * tables here, and each event's effect on it is applied exactly once.
   */
  get db(): Database.Database {
    this.assertOpen('db');
    return this.box.file.db;
  }

  /**
   * Puts an emission of `asset` in this file's outbox, delivered by the relay after the commit. Its key
   * derives from the consumed event's id, so processing the event again (after a crash, or on a fresh
   * file) derives the same key and the server keeps one event. The server also learns the cause, and
   * refuses an emission that would loop back into its own lineage (`feedback_loop`).
   */
  emit(asset: string, input: EmissionInput = {}, options: CausedEmitOptions = {}): Emission {
    this.assertOpen('emit');
    const cause = options.cause ?? this.onlyEvent();
    if (!this.events.some((event) => event.eventId === cause.eventId)) {
      throw new OptionsError('cause', `tx.emit(): cause must be one of the events this handler got; event ${cause.eventId} is not`);
    }
    return this.commit.emitCaused(this.box.asset(asset), input, { eventId: cause.eventId, cursor: cause.cursor, scope: this.scope });
  }

  /** @internal */
  end(): void {
    this.open = false;
  }

  private onlyEvent(): StoredEvent {
    if (this.events.length !== 1) {
      throw new OptionsError(
        'cause',
        `tx.emit(): this handler got ${this.events.length} events; say which one the emission responds to with tx.emit(asset, input, { cause: event })`,
      );
    }
    return this.events[0]!;
  }

  private assertOpen(what: string): void {
    if (!this.open) throw new CommitEndedError(`tx.${what}: this commit has already ended; use tx only inside the commit callback`);
  }
}
