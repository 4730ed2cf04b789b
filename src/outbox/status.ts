import type { OutboxFile } from './file/outbox-file.js';
import { deathOf } from './file/rows.js';
import { leaseHolder } from './relay/lease.js';
import type { RelayError } from './events.js';
import type { Relay } from './relay/relay.js';
import { runKeyOf } from './run.js';

export interface DeadRow {
  id: number;
  key: string;
  asset: string;
  partitionKey: string | null;
  code: string;
  reason: string;
}

export interface OutboxStatus {
  path: string;
  producer: string | undefined;
  /** The run context the file was last opened with. */
  run: { workflow: string; runId: string; task?: string; attempt: number } | null;
  /** Emissions by state. */
  pending: number;
  delivered: number;
  dead: number;
  /** Checkpoint updates not yet mirrored to the server. */
  pendingCheckpoints: number;
  /** Emissions held for their run's success (`on: 'success'`), and those a failed run discarded. */
  held: number;
  discarded: number;
  /** Whether a later attempt of the file's run has claimed the run at the server, delivered to it, or opened this file, and which. */
  fenced: boolean;
  fencedBy: number | null;
  /** Age in ms of the oldest pending row, or null when nothing is pending. */
  oldestPendingAgeMs: number | null;
  lease: { owner: string; pid: number; host: string; expiresAt: string } | null;
  /** The relay's last delivery error, while it lasts: a delivery that goes through again clears it. */
  lastError: RelayError | null;
  /** The first dead rows, with the server's reason for each. */
  deadRows: DeadRow[];
}

/** @internal Reads the counts and health of an outbox file. */
export function readStatus(file: OutboxFile, relay?: Relay, now: number = Date.now()): OutboxStatus {
  const s = file.rows;
  const counts = { pending: 0, delivered: 0, dead: 0 };
  const lifecycle = { held: 0, released: 0, discarded: 0 };
  for (const row of file.terminal.countByState.all({})) lifecycle[row.state] = row.count;
  let pendingCheckpoints = 0;
  let oldestPending: number | null = null;
  for (const row of s.countByState.all()) {
    if (row.kind === 'event') counts[row.state] = row.count;
    else if (row.state === 'pending') pendingCheckpoints = row.count;
    if (row.state === 'pending' && row.oldest !== null) oldestPending = Math.min(oldestPending ?? row.oldest, row.oldest);
  }
  const run = file.meta.read('run') ?? null;
  const fence = run ? file.runs.supersededBy(runKeyOf(run), run.attempt) : undefined;
  const lease = leaseHolder(file);
  return {
    path: file.path,
    producer: file.meta.read('producer'),
    run,
    ...counts,
    pendingCheckpoints,
    held: lifecycle.held,
    discarded: lifecycle.discarded,
    fenced: fence !== undefined,
    fencedBy: fence?.by ?? null,
    oldestPendingAgeMs: oldestPending === null ? null : Math.max(0, now - oldestPending),
    lease: lease
      ? { owner: lease.owner, pid: lease.pid, host: lease.host, expiresAt: new Date(lease.expiresAt).toISOString() }
      : null,
    lastError: relay?.lastError ?? file.meta.read('relay_last_error') ?? null,
    deadRows: s.deadRows.all({ limit: 20 }).filter((row) => row.kind === 'event').map((row) => ({
      id: row.id,
      key: row.key,
      asset: row.asset,
      partitionKey: row.partition_key,
      ...deathOf(row),
    })),
  };
}
