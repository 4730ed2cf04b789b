import { Command, Option } from 'commander';
import { ServerClient } from '../client/server-client.js';
import { OutboxFile } from '../outbox/file/outbox-file.js';
import { assembleDelivery, assertStreamToken } from '../outbox/relay/assemble.js';
import { RELAY_DEFAULTS } from '../outbox/relay/defaults.js';
import { recordRelayError } from '../outbox/relay/relay.js';
import { OnceboxError } from '../protocol/errors.js';
import { readStatus } from '../outbox/status.js';
import { DrainProgress, type DrainCounts, type ProgressOutput } from './drain-progress.js';
import { DrainTally } from './drain-tally.js';
import { clientToken, serverOption, Exit, exitsWith, stopSignal, UsageError, withTokenOptions } from './arguments.js';

/** `oncebox relay FILE`: delivers an outbox file from a process of its own. */
export function relayCommand(program: Command): Command {
  const command = program
    .command('relay')
    .summary("deliver an outbox file from a process of its own")
    .description(
      "Delivers an outbox file's pending rows to the server, in commit order, for a job opened with relay: 'external', " +
        'or to finish what a job left behind. Runs until stopped, or with --drain until nothing is pending.',
    )
    .argument('[file]', "the job's outbox file (the path it gave openOutbox)")
    .addOption(new Option('--db <file>', 'the outbox file, as a flag (as FILE)').hideHelp())
    .addOption(serverOption())
    .option('--drain', 'exit once nothing is pending: 0 when all was delivered, 3 when rows are dead, 1 otherwise');
  return withTokenOptions(command)
    .addHelpText(
      'after',
      `
Examples:
  $ ONCEBOX_TOKEN=$(cat job.token) oncebox relay .oncebox/orders-ingest.db --server http://127.0.0.1:8787 --drain
  $ oncebox relay .oncebox/orders-ingest.db --server http://a:8787 --server http://b:8787 --token-file job.token

A token the server refuses (401, 403) ends it at once with status 1, naming the fix; nothing pending is lost.`,
    )
    .action(
      exitsWith((file: string | undefined, flags: { db?: string; server: string[]; drain?: boolean; token?: string; tokenFile?: string }) => {
        const db = file ?? flags.db;
        if (db === undefined) throw new UsageError('relay: give the outbox FILE to deliver');
        if (file !== undefined && flags.db !== undefined && file !== flags.db) throw new UsageError('relay: give the outbox file once, as FILE');
        return runRelay({ db, servers: flags.server, token: clientToken(flags, 'relay'), drain: flags.drain ?? false, signal: stopSignal() });
      }),
    );
}

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
export const RelayExit = { Drained: Exit.Ok, NotDrained: Exit.Failed, DeadRows: Exit.NeedsAttention } as const;

/** `oncebox relay`: delivers an outbox file that a job (opened with relay: 'external') commits to. */
export async function runRelay(options: RelayCommandOptions): Promise<number> {
  // The relay's timers are unref'd, so as not to hold a job's process open once its work is done; this
  // process exists for the relay, and lives until it is told to stop. Held from the first moment: the
  // token check below may be the only thing in flight.
  const keepAlive = setInterval(() => undefined, 60_000);
  try {
    return await relayUntilStopped(options);
  } finally {
    clearInterval(keepAlive);
  }
}

async function relayUntilStopped(options: RelayCommandOptions): Promise<number> {
  const file = new OutboxFile(options.db, 'full', false);
  // Built as a job's in-process relay is (relay/assemble.ts), with the defaults a job gets.
  const client = new ServerClient({ servers: options.servers, token: options.token, requestTimeoutMs: RELAY_DEFAULTS.requestTimeoutMs });
  // A token the server refuses is said at once, with nothing pending too, as a job says it at open.
  const run = file.meta.read('run');
  const producer = file.meta.read('producer');
  if (run && producer !== undefined) {
    try {
      await assertStreamToken(client, producer, run, RELAY_DEFAULTS.requestTimeoutMs);
    } catch (error) {
      // Written where `oncebox status` looks, as a relay that stops on it mid-way writes it.
      if (error instanceof OnceboxError) recordRelayError(file, error, true);
      file.close();
      throw error;
    }
  }
  let tally: DrainTally | undefined;
  const relay = assembleDelivery(file, RELAY_DEFAULTS, client, { pending: () => file.pendingByKind(), onSettled: (rows) => tally?.settled(rows) }).relay!;
  const counts = (): DrainCounts => {
    const status = readStatus(file, relay);
    return { pending: status.pending, checkpoints: status.pendingCheckpoints, delivered: status.delivered, dead: status.dead };
  };
  const drainFile = {
    // One read transaction, so that a commit between the two reads is in both or in neither.
    count: file.db.transaction(() => ({ counts: counts(), newestId: file.rows.newestId.get()?.id ?? 0 })),
    eventsAfter: (id: number) => file.rows.countEventsAfter.get({ id })?.count ?? 0,
  };
  tally = options.drain ? new DrainTally(drainFile) : undefined;
  // The relay watches the file for the job's commits itself (another connection's, seen by data_version).
  relay.start();
  // The exact count that found nothing pending: the drain's last word, whatever the job commits after it.
  let drained: DrainCounts | undefined;
  const progress = tally ? new DrainProgress(options.progressOutput ?? process.stdout, tally.current()) : undefined;
  try {
    if (options.drain) {
      while (!options.signal.aborted) {
        const idle = await relay.drain(PROGRESS_EVERY_MS);
        if (relay.failure) break;
        // Done when an exact count agrees: a job may commit between the relay's last look and it, and
        // what it committed is drained too rather than left behind as "interrupted".
        if (idle) {
          const now = counts();
          if (nothingPending(now)) {
            drained = now;
            break;
          }
        }
        progress!.update(tally!.current());
      }
    } else if (!options.signal.aborted) {
      // Told to stop during its start (the token check can take a second): the abort event is gone by now.
      await new Promise<void>((resolve) => options.signal.addEventListener('abort', () => resolve(), { once: true }));
    }
  } finally {
    await relay.stop();
  }
  const failure = relay.failure;
  const end = drained ?? counts();
  file.close();
  if (failure) {
    progress?.finish(end, 'stopped');
    console.error(`oncebox relay: stopped: ${failure.message} [${failure.code}]`);
    return RelayExit.NotDrained;
  }
  if (!options.drain) return RelayExit.Drained;
  if (!nothingPending(end)) {
    progress!.finish(end, 'interrupted');
    return RelayExit.NotDrained;
  }
  progress!.finish(end, 'drained');
  if (end.dead > 0) {
    console.error(`oncebox relay: ${end.dead} event${end.dead === 1 ? ' is' : 's are'} dead (refused for good): see \`oncebox dead list ${options.db}\``);
    return RelayExit.DeadRows;
  }
  return RelayExit.Drained;
}

function nothingPending(counts: DrainCounts): boolean {
  return counts.pending + (counts.checkpoints ?? 0) === 0;
}
