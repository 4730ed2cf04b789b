import { ServerClient } from '../client/server-client.js';
import { OutboxFile } from '../outbox/file/outbox-file.js';
import { assembleDelivery } from '../outbox/relay/assemble.js';
import { RELAY_DEFAULTS } from '../outbox/relay/defaults.js';
import { readStatus } from '../outbox/status.js';
import { DrainProgress, type DrainCounts, type ProgressOutput } from './drain-progress.js';

/** How often a drain looks whether it is done, and updates its progress. */
const PROGRESS_EVERY_MS = 100;

export interface RelayCommandOptions {
  db: string;
  servers: string[];
  token?: string | undefined;
  /** Exit once nothing is pending, instead of running until a signal. */
  drain: boolean;
  signal: AbortSignal;
  /** Where drain progress goes. @defaultValue process.stdout */
  progressOutput?: ProgressOutput;
}

/** How `oncebox relay` ends: every row delivered; stopped or interrupted with rows pending; rows dead. */
export const RelayExit = { Drained: 0, NotDrained: 1, DeadRows: 3 } as const;

/** `oncebox relay`: delivers an outbox file that a job (opened with relay: 'external') commits to. */
export async function runRelay(options: RelayCommandOptions): Promise<number> {
  const file = new OutboxFile(options.db, 'full', false);
  // Built as a job's in-process relay is (relay/assemble.ts), with the defaults a job gets.
  const client = new ServerClient({ servers: options.servers, token: options.token, requestTimeoutMs: RELAY_DEFAULTS.requestTimeoutMs });
  const relay = assembleDelivery(file, RELAY_DEFAULTS, client, { pending: () => file.pendingCount() }).relay!;
  // The relay watches the file for the job's commits itself (another connection's, seen by data_version).
  relay.start();
  // The relay's timers are unref'd, so as not to hold a job's process open once its work is done; this
  // process exists for the relay, and lives until it is told to stop.
  const keepAlive = setInterval(() => undefined, 60_000);
  const counts = (): DrainCounts => {
    const status = readStatus(file, relay);
    return { pending: status.pending + status.pendingCheckpoints, delivered: status.delivered, dead: status.dead };
  };
  const progress = options.drain ? new DrainProgress(options.progressOutput ?? process.stdout, counts()) : undefined;
  try {
    if (options.drain) {
      while (!options.signal.aborted && !(await relay.drain(PROGRESS_EVERY_MS))) {
        if (relay.failure) break;
        progress!.update(counts());
      }
    } else {
      await new Promise<void>((resolve) => options.signal.addEventListener('abort', () => resolve(), { once: true }));
    }
  } finally {
    clearInterval(keepAlive);
    await relay.stop();
  }
  const failure = relay.failure;
  const end = counts();
  file.close();
  if (failure) {
    progress?.finish(end, 'stopped');
    console.error(`oncebox relay: stopped: ${failure.message} [${failure.code}]`);
    return RelayExit.NotDrained;
  }
  if (!options.drain) return RelayExit.Drained;
  if (end.pending > 0) {
    progress!.finish(end, 'interrupted');
    return RelayExit.NotDrained;
  }
  progress!.finish(end, 'drained');
  if (end.dead > 0) {
    console.error(`oncebox relay: ${end.dead} row(s) are dead: see \`oncebox dead list ${options.db}\``);
    return RelayExit.DeadRows;
  }
  return RelayExit.Drained;
}
