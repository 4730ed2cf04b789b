import { z } from 'zod';
import { assetNameSchema } from './emission.js';
import { Limits } from './limits.js';
import type { RejectionCode } from './errors.js';
import { traceContextSchema, type TraceContext } from './trace.js';
import { plainText } from './text.js';

/** The wire format of `POST /v1/emissions` and `GET /v1/events`. docs/protocol.md describes it for people. */

export const nameSchema = plainText(z.string().min(1).max(Limits.maxNameLength, { error: `must be at most ${Limits.maxNameLength} characters` }));

/** The highest attempt number a stream may reach: the wire refuses a higher one in every request. */
export const MAX_ATTEMPT = 1_000_000;

/** Who sends a batch: one producer's stream for one run, at one attempt. */
export const streamIdentitySchema = z.strictObject({
  producer: nameSchema,
  workflow: nameSchema,
  runId: nameSchema,
  task: nameSchema.nullable(),
  attempt: z.number().int().min(1).max(MAX_ATTEMPT),
});
export type StreamIdentity = z.infer<typeof streamIdentitySchema>;

/**
 * The envelope is checked strictly; the items only loosely, so that one bad item gets its own
 * `rejected` result instead of failing the whole batch.
 */
export const emissionBatchSchema = z.strictObject({
  stream: streamIdentitySchema,
  items: z.array(z.unknown()).min(1, { error: 'must hold at least one item' }),
});

export const itemPositionSchema = z.object({
  seq: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  key: z.uuid(),
});

/** The fields of a checkpoint item besides its position. */
export const checkpointItemFieldsSchema = z.strictObject({
  name: nameSchema,
  value: z.unknown(),
  // Both stores keep it as a 32-bit integer; the producer raises it once per coalesced commit.
  revision: z.number().int().min(1).max(2 ** 31 - 1).optional(),
});

/** The query of `GET /v1/events`. */
export const eventQuerySchema = z.strictObject({
  asset: assetNameSchema.optional(),
  after: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  /** Seconds to wait for a new event when none is there yet (long-poll); 0 answers at once. */
  wait: z.coerce.number().min(0).max(30).default(0),
  /** The consumer group reading, for its last fetch in the catalog (recorded when the token may act as the group's producer). */
  group: nameSchema.optional(),
  /** The group's producer, when it is not the group's own name. */
  groupProducer: nameSchema.optional(),
});

/**
 * The body of `POST /v1/streams/:producer/:runId/attempts`: claim an attempt of the run. Either the next
 * one, at least `atLeast` (one above the attempt the caller's own file last opened, for a server that
 * lost its state), or `exactly` one number handed out by an ordered source the caller trusts (a job
 * queue's lock-guarded counter): granted only while it is above the stream's epoch, so that a claim that
 * arrives late can never fence a later one.
 */
const claimTask = nameSchema.nullable().default(null);
const claimNumber = z
  .number({ error: 'must be a number' })
  .int({ error: 'must be a whole number' })
  .min(1, { error: 'must be at least 1' })
  .max(MAX_ATTEMPT, { error: `must be at most ${MAX_ATTEMPT}` });
/** A claim of the run's next attempt. */
export const nextAttemptClaimSchema = z.strictObject({ task: claimTask, atLeast: claimNumber.optional() });
/** A claim of exactly one attempt. */
export const exactAttemptClaimSchema = z.strictObject({ task: claimTask, exactly: claimNumber });
export const attemptClaimSchema = z.union([nextAttemptClaimSchema, exactAttemptClaimSchema]);
export type AttemptClaimRequest = z.input<typeof attemptClaimSchema>;

/** What a claim asks for: the run's next attempt (at least a number), or exactly one number. */
export type AttemptClaim = { atLeast: number } | { exactly: number };

/** The answer to an attempt claim: the attempt is the stream's epoch now, and every lower one is fenced. */
export interface ClaimedAttempt {
  attempt: number;
}

/** The path and query of `GET /v1/streams/:producer/:runId`. */
export const streamParamsSchema = z.strictObject({ producer: nameSchema, runId: nameSchema });
export const streamQuerySchema = z.strictObject({ task: nameSchema.optional() });

/** One item as the relay sends it: its place in the stream, its key, and the payload. */
export type WireItem = WireEventItem | WireCheckpointItem;

export interface WireEventItem {
  seq: number;
  key: string;
  kind: 'event';
  asset: string;
  partitionKey?: string;
  partitionDate?: string;
  extra?: Record<string, unknown>;
  /** The W3C trace context the emission was committed in: metadata, in neither key nor fingerprint. */
  trace?: TraceContext;
  /**
   * The event this one was emitted in response to (a consumer's `tx.emit`), by its cursor on this server:
   * metadata, in neither key nor fingerprint. The server derives the lineage from it.
   */
  cause?: EventCause;
}

/** Which stored event caused an emission: its cursor, which the server indexes and never reuses. */
export interface EventCause {
  cursor: number;
}

export const eventCauseSchema = z.strictObject({ cursor: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER) });

/**
 * A checkpoint update, delivered in the same ordered stream as the emissions it follows, so that the
 * server's copy of a checkpoint is never ahead of the events it has accepted.
 */
export interface WireCheckpointItem {
  seq: number;
  key: string;
  kind: 'checkpoint';
  name: string;
  value: unknown;
  /**
   * How often the producer revised this update before it was delivered (absent for 0): consecutive
   * checkpoint-only commits are coalesced into one row, which is then sent again at the same position.
   */
  revision?: number;
}

export interface EmissionBatch {
  stream: StreamIdentity;
  items: WireItem[];
}

export interface Receipt {
  eventId: string;
  /** The server's clock when it first stored the event, ISO 8601 in UTC. */
  timestamp: string;
  /** True when this call was a retry of an event the server already held. */
  duplicate: boolean;
}

export type ItemResult =
  | { status: 'accepted' | 'duplicate'; seq: number; key: string; eventId: string; timestamp: string }
  | { status: 'conflict'; seq: number; key: string; code: 'key_conflict'; detail: string }
  | {
      status: 'rejected';
      seq: number | null;
      key: string | null;
      code: RejectionCode;
      detail: string;
      field?: string;
    }
  /** Transient: the item came before the ones the server is waiting for; resend from `expectedSeq`. */
  | { status: 'gap'; seq: number; key: string; expectedSeq: number }
  /** A checkpoint item, applied to the server's copy of the stream's checkpoints. */
  | { status: 'checkpointed'; seq: number; key: string }
  /** A later attempt of the same run has delivered: this attempt may deliver nothing more. */
  | { status: 'fenced'; seq: number | null; key: string | null; code: 'fenced'; epoch: number; detail: string };

export interface EmissionBatchResponse {
  results: ItemResult[];
}

/** What `GET /v1/streams/:producer/:runId` returns: enough for a retry on a fresh machine to resume. */
export interface StreamState {
  producer: string;
  runId: string;
  task: string | null;
  /** The highest attempt that has delivered anything; items of lower attempts are fenced. */
  epoch: number;
  /** The last sequence number taken, per attempt. */
  attempts: { attempt: number; lastSeq: number }[];
  /** The mirrored checkpoints, by name: never ahead of the emissions the server accepted. */
  checkpoints: Record<string, unknown>;
}

/** An event as `GET /v1/events` returns it, as a schema (the OpenAPI document, the catalog). */
export const storedEventSchema = z.object({
  cursor: z.number().int(),
  eventId: z.uuid(),
  timestamp: z.iso.datetime(),
  key: z.uuid(),
  asset: z.string(),
  partitionKey: z.string().nullable(),
  partitionDate: z.string().nullable(),
  extra: z.record(z.string(), z.unknown()).nullable(),
  producer: z.string(),
  workflow: z.string(),
  runId: z.string(),
  task: z.string().nullable(),
  attempt: z.number().int(),
  seq: z.number().int(),
  trace: traceContextSchema.nullable().describe('The W3C trace context the producer committed the emission in.'),
  causedBy: z.uuid().nullable().describe('The id of the event this one was emitted in response to; null for a producer\'s own event.'),
  depth: z.number().int().describe('How many emissions lie between this event and its first cause: 0 for a producer\'s own.'),
});

/** An event as `GET /v1/events` returns it. */
export interface StoredEvent {
  cursor: number;
  eventId: string;
  timestamp: string;
  key: string;
  asset: string;
  partitionKey: string | null;
  partitionDate: string | null;
  extra: Record<string, unknown> | null;
  producer: string;
  workflow: string;
  runId: string;
  task: string | null;
  attempt: number;
  seq: number;
  /** The W3C trace context the producer committed the emission in; null without OpenTelemetry there. */
  trace: TraceContext | null;
  /** The id of the event this one was emitted in response to; null for an event no consumer emitted. */
  causedBy: string | null;
  /** How many emissions lie between this event and its first cause: 0 for a producer's own event. */
  depth: number;
}

export interface EventPage {
  events: StoredEvent[];
  /** Pass as `after` to get the next page; equal to the `after` given when the page is empty. */
  next: number;
}

/** RFC 9457 problem details, with oncebox's stable `code`. */
/**
 * `GET /v1/token`: what the caller's token may do, as the server sees it (never its secret). A job checks
 * at open that its token may publish, and which assets, so that a read token or a misspelt asset is
 * refused before any work rather than at the first delivery.
 */
export interface TokenScopeAnswer {
  scope: 'publish' | 'read' | 'admin';
  /** One producer, a prefix ending in `*`, or `*` for all. */
  producers: string;
  /** The assets it may publish to (publish) or read (read); null for all. */
  assets: string[] | null;
  /** The assets whose events it may name as a cause; null for all. */
  consumes: string[] | null;
  reads: ('events' | 'streams' | 'metrics')[];
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  field?: string;
  instance?: string;
  /** On `attempt_taken` and `attempt_too_high`: the stream's epoch, which a new claim must go above. */
  epoch?: number;
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';
