/**
 * Every error oncebox raises is a class with a stable `code`. Callers branch on `code` (or on the class),
 * never on the message, which is written for people and may be reworded.
 */

/** Codes a producer can see thrown or in a rejected receipt promise. */
export const ProducerErrorCode = {
  InvalidOption: 'invalid_option',
  InvalidEmission: 'invalid_emission',
  InvalidCheckpoint: 'invalid_checkpoint',
  KeyConflict: 'key_conflict',
  AsyncCommit: 'async_commit',
  NoRunContext: 'no_run_context',
  OutboxClosed: 'outbox_closed',
  SchemaTooNew: 'schema_too_new',
  WrongOutboxFile: 'wrong_outbox_file',
  OutboxFileUnusable: 'outbox_file_unusable',
  /** A commit could not be written to the outbox file: its disk is full, another process held the file too long, an I/O error. */
  OutboxWriteFailed: 'outbox_write_failed',
  LeaseLost: 'lease_lost',
  Rejected: 'rejected',
  StreamStateLost: 'stream_state_lost',
  Fenced: 'fenced',
  ResumeUnavailable: 'resume_unavailable',
  DeadLetterRefused: 'dead_letter_refused',
  Internal: 'internal',
  NotCommitted: 'not_committed',
  CommitEnded: 'commit_ended',
  RunEnded: 'run_ended',
  /** The server requires a token and got none, or one it does not know (401). */
  Unauthorized: 'unauthorized',
  /** The server knows the token, but it does not cover what was asked (403). */
  Forbidden: 'forbidden',
} as const;
export type ProducerErrorCode = (typeof ProducerErrorCode)[keyof typeof ProducerErrorCode];

/**
 * Codes the server gives a single item that it will never accept, however often it is retried.
 * They travel in `rejected` results and in the `RejectedError` the producer raises.
 */
export const RejectionCode = {
  InvalidItem: 'invalid_item',
  UnknownAsset: 'unknown_asset',
  KeyConflict: 'key_conflict',
  SequenceReused: 'sequence_reused',
  AttemptTooHigh: 'attempt_too_high',
  /** The token that sent the item may not publish to its asset. */
  Forbidden: 'forbidden',
  /** The event's lineage already holds its asset and partition: a consumer would trigger itself forever. */
  FeedbackLoop: 'feedback_loop',
  /** The event is more emissions deep than the server allows for its asset. */
  LineageTooDeep: 'lineage_too_deep',
  /** A checkpoint of a new name, in a stream that holds Limits.maxCheckpointNames names already. */
  TooManyCheckpoints: 'too_many_checkpoints',
} as const;
export type RejectionCode = (typeof RejectionCode)[keyof typeof RejectionCode];

/** Codes of RFC 9457 problem documents: the request as a whole was refused. */
export const ProblemCode = {
  MalformedJson: 'malformed_json',
  InvalidRequest: 'invalid_request',
  UnsupportedMediaType: 'unsupported_media_type',
  BodyTooLarge: 'body_too_large',
  BatchTooLarge: 'batch_too_large',
  Unauthorized: 'unauthorized',
  /** A valid token, asking for something outside its scope. */
  Forbidden: 'forbidden',
  RateLimited: 'rate_limited',
  NotFound: 'not_found',
  /** A method the route does not have; the Allow header names those it has. */
  MethodNotAllowed: 'method_not_allowed',
  /** An attempt claimed `exactly` that the stream's epoch has reached already: a later claim was first. */
  AttemptTaken: 'attempt_taken',
  /** A claim that would move the epoch further than the server allows (maxAttemptStep, or the last attempt). */
  AttemptTooHigh: 'attempt_too_high',
  RequestTimeout: 'request_timeout',
  /** An Expect header other than 100-continue, which is all this server meets. */
  ExpectationFailed: 'expectation_failed',
  /** The instance holds as much as it takes (waiting reads): retry after the Retry-After. */
  Overloaded: 'overloaded',
  ShuttingDown: 'shutting_down',
  Internal: 'internal',
} as const;
export type ProblemCode = (typeof ProblemCode)[keyof typeof ProblemCode];

export class OnceboxError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** An option given to `openOutbox`, `createServer` or the CLI is unknown, misspelt or out of range. */
export class OptionsError extends OnceboxError {
  constructor(readonly field: string, message: string) {
    super(ProducerErrorCode.InvalidOption, message);
  }
}

/** An emission was refused at commit: nothing of that commit was written. */
export class EmissionValidationError extends OnceboxError {
  constructor(readonly field: string, message: string) {
    super(ProducerErrorCode.InvalidEmission, message);
  }
}

/** A checkpoint value did not match its schema, on write or on read. */
export class CheckpointValidationError extends OnceboxError {
  constructor(readonly checkpoint: string, readonly field: string, message: string) {
    super(ProducerErrorCode.InvalidCheckpoint, message);
  }
}

/** The same idempotency key was committed before with a different payload. */
export class KeyConflictError extends OnceboxError {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(ProducerErrorCode.KeyConflict, message);
  }
}

export class AsyncCommitError extends OnceboxError {
  constructor() {
    super(
      ProducerErrorCode.AsyncCommit,
      'commit(fn): fn returned a promise. A commit is one synchronous SQLite transaction; ' +
        'do the async work (e.g. writing the batch) before commit() and keep fn synchronous.',
    );
  }
}

export class NoRunContextError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.NoRunContext, message);
  }
}

export class OutboxClosedError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.OutboxClosed, message);
  }
}

/** An emission's key or receipt asked for inside its commit, before the commit has returned. */
export class NotCommittedError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.NotCommitted, message);
  }
}

/** A commit's `tx` used after the commit callback returned (kept past its commit, or used in a callback). */
export class CommitEndedError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.CommitEnded, message);
  }
}

/** A commit after the attempt's terminal commit (`box.complete`, `box.fail`), or the other terminal commit after one. */
export class RunEndedError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.RunEnded, message);
  }
}

/**
 * A database (an outbox file, the server's SQLite file or its PostgreSQL schema) was migrated by a newer
 * oncebox than this one. Nothing was changed in it.
 */
export class SchemaTooNewError extends OnceboxError {
  constructor(
    /** The file path, or `PostgreSQL schema "name"`. */
    readonly location: string,
    readonly found: number,
    readonly known: number,
  ) {
    super(
      ProducerErrorCode.SchemaTooNew,
      `${location}: schema version ${found} is newer than this oncebox knows (${known}). ` +
        'A newer oncebox migrated it; upgrade oncebox rather than opening it with an older one.',
    );
  }
}

/**
 * A rule inside oncebox itself was broken (a bug, not a bad input or a failing server). Reporting it is
 * the fix: the message says which rule.
 */
export class InternalError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.Internal, message);
  }
}

export class WrongOutboxFileError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.WrongOutboxFile, message);
  }
}

/** The outbox file cannot be opened or read: a missing directory, no permission, not an outbox, corrupt. */
export class OutboxFileError extends OnceboxError {
  constructor(
    readonly file: string,
    cause: unknown,
  ) {
    const code = (cause as { code?: string } | undefined)?.code;
    const reason = cause instanceof Error ? `${code ?? cause.name}: ${cause.message}` : String(cause);
    // A tool pointed at the wrong file (the server's database, a typo) needs the right path, not advice
    // about a damaged outbox, whose pending rows moving it aside would take along.
    const fix =
      code === 'NOT_AN_OUTBOX' || code === 'ENOENT' || code === 'EISDIR' || code === 'SQLITE_NOTADB'
        ? "Point it at the job's outbox file: the path the job gave openOutbox."
        : 'Check that the path is right and that its directory exists and is writable. A damaged outbox still holds pending rows: ' +
          'keep a copy before anything else, and see docs/operations.md.';
    super(ProducerErrorCode.OutboxFileUnusable, `${file}: cannot use this outbox file (${reason}). ${fix}`, { cause });
  }
}

/**
 * SQLite could not write a commit to the outbox file, for a reason of the moment rather than of the data:
 * the commit wrote nothing (its checkpoints and emissions are as they were before it), and the same
 * commit succeeds once the cause is gone. `sqliteCode` is SQLite's own (SQLITE_FULL, SQLITE_BUSY…);
 * the `cause` is better-sqlite3's error.
 */
export class OutboxWriteError extends OnceboxError {
  readonly sqliteCode: string;
  constructor(
    readonly file: string,
    cause: Error & { code: string },
  ) {
    const what = cause.code.startsWith('SQLITE_FULL')
      ? 'the disk it is on is full. Free space there'
      : /^SQLITE_(BUSY|LOCKED)/.test(cause.code)
        ? 'another process held the file past the busy timeout. Find what holds it (a second job or tool on the same file)'
        : 'the disk or file system failed to read or write it. Check the disk';
    super(
      ProducerErrorCode.OutboxWriteFailed,
      `${file}: this commit wrote nothing (${cause.code}: ${cause.message}): ${what}, then commit again, or let the job fail: its retry resumes ` +
        'from the last checkpoint that was written (docs/runbook.md)',
      { cause },
    );
    this.sqliteCode = cause.code;
  }
}

/** The relay's lease on the outbox was taken by another relay; it may no longer mark rows. */
export class LeaseLostError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.LeaseLost, message);
  }
}

/**
 * The server refused an emission for good. The row is parked as dead in the outbox with this code and
 * reason; the rest of the stream goes on.
 */
export class RejectedError extends OnceboxError {
  constructor(
    readonly rejection: string,
    readonly key: string,
    message: string,
  ) {
    super(ProducerErrorCode.Rejected, message);
  }
}

/** The server no longer knows a stream that this outbox already delivered to: its store was reset. */
export class StreamStateLostError extends OnceboxError {
  constructor(message: string) {
    super(ProducerErrorCode.StreamStateLost, message);
  }
}

/**
 * A later attempt of this run has delivered events, so this attempt (a zombie: a worker that lost its
 * heartbeat but not its process) may deliver nothing more. Its pending rows are parked, and every
 * further commit or emit throws this, so that its loop ends instead of working on in vain.
 */
export class FencedError extends OnceboxError {
  constructor(
    readonly attempt: number,
    readonly fencedBy: number,
    message: string,
  ) {
    super(ProducerErrorCode.Fenced, message);
  }
}

/**
 * The server refused the token: it requires one and got none, or does not know the one given (401,
 * `unauthorized`), or the token does not cover what was asked (403, `forbidden`). Permanent: retrying
 * with the same token cannot help, so the relay, the consumer and every command stop at once with
 * this error, whose message names the fix. Nothing pending is lost: the next run with a good token
 * delivers it.
 */
export class CredentialsError extends OnceboxError {
  constructor(
    readonly status: 401 | 403,
    /** The URL that refused. */
    readonly url: string,
    message: string,
  ) {
    super(status === 401 ? ProducerErrorCode.Unauthorized : ProducerErrorCode.Forbidden, message);
  }
}

/** A retry on a fresh machine could not read the run's state from the server to resume from. */
export class ResumeUnavailableError extends OnceboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ProducerErrorCode.ResumeUnavailable, message, options);
  }
}

/** A dead row cannot be sent again or discarded as asked: `rows` says which, and why each. */
export class DeadLetterError extends OnceboxError {
  constructor(
    readonly rows: readonly { id: number; why: string }[],
    message: string,
  ) {
    super(ProducerErrorCode.DeadLetterRefused, message);
  }
}
