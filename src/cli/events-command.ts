import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import { RELAY_DEFAULTS } from '../outbox/relay/defaults.js';
import { ServerClient } from '../client/server-client.js';
import { CredentialsError, OnceboxError } from '../protocol/errors.js';
import type { StoredEvent } from '../protocol/wire.js';
import { clientToken, serverOption, cursor, Exit, exitsWith, stopSignal, withTokenOptions } from './arguments.js';

/** `oncebox events`. */
export function eventsCommand(program: Command): Command {
  const command = program
    .command('events')
    .summary('print stored events in cursor order')
    .description('Prints the events the server stored, in cursor order: one aligned line each, or JSON lines. With --follow it waits for more.')
    .addOption(serverOption())
    .option('--asset <name>', 'only the events of this asset')
    .option('--after <cursor>', 'only the events after this cursor', cursor, 0)
    .option('--follow', 'wait for new events until stopped (Ctrl-C)')
    .option('--json', 'one JSON object per event, for scripts');
  return withTokenOptions(command)
    .addHelpText('after', '\nExample:\n  $ ONCEBOX_TOKEN=$(cat reader.token) oncebox events --server http://127.0.0.1:8787 --asset batch_ready --follow')
    .action(
      exitsWith((flags: { server: string[]; asset?: string; after: number; follow?: boolean; json?: boolean; token?: string; tokenFile?: string }) =>
        printEvents({
          servers: flags.server,
          token: clientToken(flags, 'events'),
          asset: flags.asset,
          after: flags.after,
          follow: flags.follow ?? false,
          json: flags.json ?? false,
          signal: stopSignal(),
        }),
      ),
    );
}

export interface EventsCommand {
  servers: string[];
  token: string | undefined;
  asset: string | undefined;
  after: number;
  /** Go on waiting for new events (long-poll) until stopped, instead of ending at the last one. */
  follow: boolean;
  json: boolean;
  signal: AbortSignal;
}

/** Seconds a follow request lets the server hold its answer. */
const FOLLOW_WAIT_S = 30;
/** Pause before asking again after a failed request, while following. */
const RETRY_MS = 1000;

/**
 * `oncebox events`: stored events in cursor order, one aligned line each for people or one JSON object
 * per line (--json) for scripts. With --follow it waits on the long-poll for more until stopped, and a
 * failed request is told once and tried again; without, a failure ends it with status 1.
 */
export async function printEvents(command: EventsCommand): Promise<number> {
  const client = new ServerClient({ servers: command.servers, token: command.token, requestTimeoutMs: RELAY_DEFAULTS.requestTimeoutMs });
  let after = command.after;
  let failing: string | undefined;
  let assetChecked = false;
  while (!command.signal.aborted) {
    let page;
    try {
      page = await client.events({ asset: command.asset, after, limit: 1000, waitS: command.follow ? FOLLOW_WAIT_S : 0 }, command.signal);
    } catch (error) {
      if (command.signal.aborted) break;
      const message = (error as Error).message;
      // A refused token is refused again: following on would only repeat it.
      if (!command.follow || error instanceof CredentialsError) {
        console.error(`oncebox events: ${message}${error instanceof OnceboxError ? ` [${error.code}]` : ''}`);
        return Exit.Failed;
      }
      if (message !== failing) console.error(`oncebox events: ${message}; trying again`);
      failing = message;
      await sleep(RETRY_MS, undefined, { signal: command.signal }).catch(() => undefined);
      continue;
    }
    failing = undefined;
    // An asset that is not there prints nothing, as one with no events yet would: say which it is.
    // Asked once: a follower waits on for an asset that may yet be registered, and says it only once.
    if (command.asset !== undefined && !assetChecked && page.events.length === 0) {
      assetChecked = true;
      if (!(await assetExists(client, command.asset)) && !command.follow) return Exit.Failed;
    }
    for (const event of page.events) console.log(command.json ? JSON.stringify(event) : describe(event));
    after = page.next;
    if (!command.follow && page.events.length === 0) break;
  }
  return Exit.Ok;
}

/**
 * Whether the server has `asset`; when not, says so with the names it has. A failure to list is no
 * reason to stop: the events were readable.
 */
async function assetExists(client: ServerClient, asset: string): Promise<boolean> {
  let assets: string[];
  try {
    assets = await client.assets();
  } catch {
    return true;
  }
  if (assets.includes(asset)) return true;
  const known = assets.length === 0 ? 'none' : `${assets.slice(0, 10).map((name) => JSON.stringify(name)).join(', ')}${assets.length > 10 ? ', …' : ''}`;
  console.error(`oncebox events: the server has no asset ${JSON.stringify(asset)} that this token may read (it has ${known}; \`oncebox ls assets\` lists them)`);
  return false;
}

/** One event on one line: cursor, time, asset and partition, then where it came from and its id. */
function describe(event: StoredEvent): string {
  const stream = `${event.producer}/${event.workflow}/${event.runId}${event.task === null ? '' : `/${event.task}`}`;
  return [
    String(event.cursor).padStart(8),
    event.timestamp,
    event.asset.padEnd(20),
    (event.partitionKey ?? '-').padEnd(20),
    `${stream} attempt ${event.attempt} seq ${event.seq}`,
    event.eventId,
  ].join('  ');
}
