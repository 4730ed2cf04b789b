/** What the relay tells: the public types of its logs, events and errors. */
import type { Fence } from './run.js';

/** The relay's last delivery error, as `status()` and `close()` report it. */
export interface RelayError {
  code: string;
  message: string;
  at: string;
  /**
   * The relay that met it stopped for good (a token the server refuses, a server that lost the stream's
   * state, its lease taken by another relay) rather than retrying. Absent while it retries.
   */
  stopped?: boolean;
}

/** An emission the server stored (or had stored before): its receipt. */
export interface DeliveredNotice {
  id: number;
  key: string;
  eventId: string;
  timestamp: string;
  duplicate: boolean;
}

/** An emission parked as dead: the server refused it for good, or a later attempt fenced its attempt. */
export interface DeadNotice {
  id: number;
  key: string;
  code: string;
  reason: string;
}

/** A later attempt of a run delivered: this attempt's pending rows are parked, and it should stop. */
export interface FencedNotice {
  runId: string;
  attempt: number;
  by: number;
}

/** Delivery has been failing for a while (or the relay stopped): what, since when, and what waits. */
export interface DeliveryProblem extends RelayError {
  /** When delivery began to fail, as an ISO timestamp. */
  since: string;
  /** Rows waiting in the file: `pendingEvents` and `pendingCheckpoints` together. */
  pending: number;
  /** Of `pending`, the emissions (events not yet on the server). */
  pendingEvents: number;
  /** Of `pending`, the checkpoint updates (the server's copy of the job's progress). */
  pendingCheckpoints: number;
  /** Whether the relay has stopped for good (lease lost, stream state lost) rather than retrying. */
  stopped: boolean;
}

export interface OutboxEventMap {
  delivered: [rows: DeliveredNotice[]];
  dead: [row: DeadNotice];
  fenced: [fence: FencedNotice];
  error: [problem: DeliveryProblem];
}

/** A row the relay settled with the server's answer: delivered with its receipt, or dead with the reason. */
export type SettledRow =
  | { id: number; state: 'delivered'; key: string; eventId: string; timestamp: string; duplicate: boolean; committedAt?: number }
  | { id: number; state: 'dead'; key: string; code: string; reason: string; fence?: Fence };
