import type { Generated, Selectable } from 'kysely';
import type { RunKey } from '../run.js';

/*
 * The outbox file's tables and rows, as types: what every owner of the file's statements (the rows, the
 * run attempts, the lifecycle, the dead letters, the consumer) builds its SQL against. A leaf, so that
 * none of them imports the file itself for its types.
 */

/** @internal The outbox file's tables, as kysely sees them. */
export interface OutboxSchema {
  meta: { name: string; value: string };
  outbox: {
    id: Generated<number>;
    key: string;
    key_scope: Generated<KeyScope>;
    fingerprint: string;
    workflow: string;
    run_id: string;
    task: string;
    attempt: number;
    seq: number;
    kind: RowKind;
    asset: string;
    partition_key: string | null;
    partition_date: string | null;
    extra: string | null;
    committed_at: number;
    state: Generated<RowState>;
    event_id: string | null;
    event_ts: string | null;
    duplicate: number | null;
    settled_at: number | null;
    dead_code: string | null;
    dead_reason: string | null;
    checkpoint_name: string | null;
    checkpoint_value: string | null;
    trace_context: string | null;
    revision: Generated<number>;
    cause_cursor: number | null;
  };
  checkpoints: { run_id: string; task: string; name: string; value: string; updated_at: number };
  lease: { id: number; owner: string; pid: number; host: string; expires_at: number };
  runs: { run_id: string; task: string; opened_by: number; fenced_by: Generated<number> };
  consumed: { event_id: string; cursor: number; consumed_at: number };
  trigger_arrivals: { trigger: string; partition_key: string; asset: string; event: string };
  trigger_firings: { trigger: string; partition_key: string; fired: number; last_cursor: number; fired_at: number };
  trigger_rebuild: { id: number; up_to: number; done_through: number };
  held_emissions: {
    id: Generated<number>;
    run_id: string;
    task: string;
    attempt: number;
    key: string;
    key_scope: 'partition' | 'file';
    fingerprint: string;
    asset: string;
    partition_key: string | null;
    partition_date: string | null;
    extra: string | null;
    trace_context: string | null;
    committed_at: number;
    state: 'held' | 'released' | 'discarded';
    settled_at: number | null;
    reason: string | null;
  };
  run_outcomes: { run_id: string; task: string; attempt: number; outcome: 'succeeded' | 'failed'; reason: string | null; at: number };
  dead_letter_actions: {
    id: Generated<number>;
    row_key: string;
    action: 'retried' | 'discarded';
    at: number;
    dead_code: string | null;
    dead_reason: string | null;
    note: string;
    row: string;
  };
}

export type RowState = 'pending' | 'delivered' | 'dead';

/** An emission, or a checkpoint update that travels in stream order with them. */
export type RowKind = 'event' | 'checkpoint';

/**
 * Where a row's key is unique, and so which index finds it again: see outbox migration 007.
 * - partition: derived from a partition key; unique per run, task, asset and partition;
 * - file: explicit, or derived from the commit's position; unique in the whole file;
 * - stream: a checkpoint update's, unique by its stream position;
 * - legacy: written before keys had scopes; found by either index.
 */
export type KeyScope = 'partition' | 'file' | 'stream' | 'legacy';

/** @internal An outbox row as the relay reads it: the table's columns, as kysely types them. */
export type OutboxRow = Selectable<OutboxSchema['outbox']>;

/** @internal One attempt of a run's task. */
export interface OfAttempt extends RunKey {
  attempt: number;
}

/** @internal Where the relay sent a row from, and which revision: it is marked only if it is still that row. */
export interface SentRow {
  id: number;
  attempt: number;
  seq: number;
  revision: number;
}

/** @internal The values of a new outbox row. */
export interface NewRow extends OfAttempt {
  key: string;
  keyScope: Exclude<KeyScope, 'legacy'>;
  fingerprint: string;
  workflow: string;
  seq: number;
  kind: RowKind;
  asset: string;
  partitionKey: string | null;
  partitionDate: string | null;
  extra: string | null;
  committedAt: number;
  checkpointName: string | null;
  checkpointValue: string | null;
  traceContext: string | null;
  causeCursor: number | null;
}
