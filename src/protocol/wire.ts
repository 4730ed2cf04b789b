import { z } from 'zod';
import { Limits } from './limits.js';
import type { RejectionCode } from './errors.js';

/** The wire format of `POST /v1/emissions` and `GET /v1/events`. docs/protocol.md describes it for people. */

export const nameSchema = z
  .string()
  .min(1)
  .max(Limits.maxNameLength, { error: `must be at most ${Limits.maxNameLength} characters` });

/** Who sends a batch: one producer's stream for one run, at one attempt. */
export const streamIdentitySchema = z.strictObject({
  producer: nameSchema,
  workflow: nameSchema,
  runId: nameSchema,
  task: nameSchema.nullable(),
  attempt: z.number().int().min(1).max(1_000_000),
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

/** One item as the relay sends it: its place in the stream, its key, and the payload. */
export interface WireItem {
  seq: number;
  key: string;
  kind: 'event';
  asset: string;
  partitionKey?: string;
  partitionDate?: string;
  extra?: Record<string, unknown>;
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
  | { status: 'gap'; seq: number; key: string; expectedSeq: number };

export interface EmissionBatchResponse {
  results: ItemResult[];
}

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
}

export interface EventPage {
  events: StoredEvent[];
  /** Pass as `after` to get the next page; equal to the `after` given when the page is empty. */
  next: number;
}

/** RFC 9457 problem details, with oncebox's stable `code`. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  field?: string;
  instance?: string;
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';
