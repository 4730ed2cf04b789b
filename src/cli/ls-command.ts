import Table from 'cli-table3';
import { Option, type Command } from 'commander';
import { ServerClient } from '../client/server-client.js';
import { RELAY_DEFAULTS } from '../outbox/relay/defaults.js';
import type { AssetSummary, ConsumerGroup, Page, PartitionPage, PartitionSummary, Rejection, StreamSummary } from '../protocol/catalog.js';
import { CATALOG_MAX_LIMIT, streamOutcomeSchema } from '../protocol/catalog.js';
import { RejectionCode } from '../protocol/errors.js';
import { clientToken, serverOption, Exit, exitsWith, UsageError, wholeNumber, withTokenOptions } from './arguments.js';

/** What each `oncebox ls` list shows: its route, its query from the flags, and its columns. */
interface Listing<Item> {
  route: (args: string[]) => string;
  query: (flags: Flags) => Record<string, string | undefined>;
  columns: string[];
  row: (item: Item) => (string | number)[];
  /** Printed when the list is empty. */
  none: string;
}

interface Flags {
  server: string[];
  limit: number;
  all?: boolean;
  after?: string;
  json?: boolean;
  token?: string;
  tokenFile?: string;
  prefix?: string;
  producer?: string;
  runId?: string;
  kind?: string;
  outcome?: string;
  code?: string;
  since?: string;
}

const stream = (item: { producer: string; runId: string; task: string | null }) => `${item.producer}/${item.runId}${item.task === null ? '' : `/${item.task}`}`;
const when = (at: string | null) => at ?? '-';

const LISTINGS = {
  assets: {
    route: () => '/assets',
    query: (flags) => ({ prefix: flags.prefix }),
    columns: ['ASSET', 'EVENTS', 'PARTITIONS', 'DUPLICATES', 'LAST EVENT', 'LAST RUN'],
    row: (asset) => [
      asset.name,
      asset.events,
      asset.partitions,
      asset.duplicates,
      when(asset.lastEvent?.timestamp ?? null),
      asset.lastEvent ? `${stream(asset.lastEvent)} attempt ${asset.lastEvent.attempt}` : '-',
    ],
    none: 'no assets',
  } satisfies Listing<AssetSummary>,
  partitions: {
    route: ([asset]) => `/assets/${encodeURIComponent(asset!)}/partitions`,
    query: (flags) => ({ prefix: flags.prefix }),
    columns: ['PARTITION', 'STATE', 'EVENTS', 'DUPLICATES', 'EVENT TIME', 'RUN', 'ATTEMPT', 'EVENT ID'],
    row: (partition) => [
      partition.partitionKey,
      partition.state,
      partition.events,
      partition.duplicates,
      partition.event.timestamp,
      stream(partition.event),
      partition.event.attempt,
      partition.event.eventId,
    ],
    none: 'no partitions',
  } satisfies Listing<PartitionSummary>,
  streams: {
    route: () => '/streams',
    query: (flags) => ({ producer: flags.producer, runId: flags.runId, kind: flags.kind, outcome: flags.outcome }),
    columns: ['KIND', 'STREAM', 'OUTCOME', 'EPOCH', 'LAST SEQ', 'FENCED', 'DUPLICATES', 'LAST DELIVERY'],
    row: (item) => [
      item.kind,
      stream(item),
      item.willRetry ? 'running (retrying)' : item.outcome,
      item.epoch,
      item.lastSeq,
      item.fencedAttempts.length === 0 ? '-' : item.fencedAttempts.join(','),
      item.duplicates,
      item.lastDeliveryAt,
    ],
    none: 'no streams',
  } satisfies Listing<StreamSummary>,
  consumers: {
    route: () => '/consumers',
    query: (flags) => ({ producer: flags.producer }),
    columns: ['GROUP', 'CURSOR', 'LAG', 'EPOCH', 'LAST FETCH', 'ASSETS'],
    row: (group) => [
      group.producer === group.group ? group.group : `${group.producer}/${group.group}`,
      group.cursor,
      group.lag === null ? '-' : `${group.lag}${group.lagCapped ? '+' : ''}`,
      group.epoch,
      when(group.lastFetchAt),
      group.assets?.join(',') ?? '(not named)',
    ],
    none: 'no consumer groups',
  } satisfies Listing<ConsumerGroup>,
  rejections: {
    route: () => '/rejections',
    query: (flags) => ({ producer: flags.producer, runId: flags.runId, code: flags.code, since: flags.since === undefined ? undefined : sinceTime(flags.since) }),
    columns: ['TIME', 'STREAM', 'ATTEMPT', 'SEQ', 'CODE', 'ASSET', 'FIX'],
    row: (item) => [
      item.at,
      stream(item),
      item.attempt,
      item.seq,
      item.code,
      item.asset === null ? '-' : `${item.asset}${item.partitionKey === null ? '' : `/${item.partitionKey}`}`,
      item.fix,
    ],
    none: 'no rejections',
  } satisfies Listing<Rejection>,
};
type ListName = keyof typeof LISTINGS;

/** `oncebox ls assets|partitions|streams|consumers|rejections`. */
export function lsCommand(program: Command): Command {
  const ls = program
    .command('ls')
    .summary("list what the server holds: assets, an asset's partitions, streams, consumer groups, rejections")
    .description(
      "Lists the server's catalog (GET /v1/catalog/…), as the web console shows it: one aligned row per item, or JSON lines. " +
        'It needs a token that reads events and streams (oncebox token create --scope read --reads events,streams).',
    );
  const list = (name: ListName, summary: string) =>
    withTokenOptions(
      ls
        .command(name)
        .description(summary)
        .addOption(serverOption())
        .option('--limit <n>', `rows to print (at most ${CATALOG_MAX_LIMIT} per request)`, wholeNumber, 50)
        .option('--all', 'every row, page after page')
        .option('--after <cursor>', 'go on from where an earlier listing stopped (the cursor it printed)')
        .option('--json', 'one JSON object per row, for scripts'),
    );
  list('assets', 'assets with their event count, partitions seen, duplicates absorbed and newest event').option('--prefix <text>', 'only assets whose name starts with this');
  list('partitions', "an asset's partitions: state, newest event, its run and attempt, duplicates absorbed")
    .argument('<asset>', 'the asset')
    .option('--prefix <text>', 'only partition keys that start with this (such as 2026-11)');
  list('streams', 'runs and consumer groups, newest delivery first: outcome, epoch, fenced attempts, duplicates')
    .option('--producer <name>', "only this producer's")
    .option('--run-id <id>', 'only this run')
    .addOption(new Option('--kind <kind>', 'only runs, or only consumer groups').choices(['run', 'consumer']))
    .addOption(new Option('--outcome <outcome>', 'only streams with this outcome').choices(streamOutcomeSchema.options));
  list('consumers', 'consumer groups with their cursor, lag and last fetch').option('--producer <name>', "only this producer's groups");
  list('rejections', 'items the server refused for good, newest first, with the fix; the rows wait in the jobs\' files (oncebox dead)')
    .option('--producer <name>', "only this producer's")
    .option('--run-id <id>', 'only this run')
    .addOption(new Option('--code <code>', 'only this refusal code').choices(Object.values(RejectionCode)))
    .option('--since <when>', 'only refusals since then: an ISO time, or an age such as 30m, 6h or 1d');
  for (const sub of ls.commands) {
    const name = sub.name() as ListName;
    sub
      .addHelpText('after', `\nExample:\n  $ ONCEBOX_TOKEN=$(cat .oncebox/console.token) oncebox ls ${name}${name === 'partitions' ? ' batch_ready' : ''} --server http://127.0.0.1:8787`)
      .action(exitsWith((...args: unknown[]) => listCatalog(name, args.slice(0, -2) as string[], args.at(-2) as Flags)));
  }
  return ls;
}

/** Prints one list of the catalog; a list cut short says how to go on. */
async function listCatalog(name: ListName, args: string[], flags: Flags): Promise<number> {
  const listing = LISTINGS[name] as Listing<unknown>;
  const client = new ServerClient({ servers: flags.server, token: clientToken(flags, `ls ${name}`), requestTimeoutMs: RELAY_DEFAULTS.requestTimeoutMs });
  if (flags.limit < 1) throw new UsageError(`ls ${name}: --limit must be at least 1`);
  const items: unknown[] = [];
  let after = flags.after;
  for (;;) {
    const wanted = flags.all ? CATALOG_MAX_LIMIT : Math.min(CATALOG_MAX_LIMIT, flags.limit - items.length);
    const page = await client.catalog<Page<unknown> | PartitionPage>(listing.route(args), { ...listing.query(flags), after, limit: wanted });
    items.push(...page.items);
    after = page.next ?? undefined;
    if (after === undefined || (!flags.all && items.length >= flags.limit)) break;
  }
  if (flags.json) for (const item of items) console.log(JSON.stringify(item));
  else if (items.length === 0) console.log(listing.none);
  else console.log(table(listing.columns, items.map(listing.row)));
  if (after !== undefined) console.error(`(more: add --after ${after}, or --all)`);
  return Exit.Ok;
}

/** Aligned columns without borders: what a terminal reads and `column -t` would make. */
function table(columns: string[], rows: (string | number)[][]): string {
  const output = new Table({
    head: columns,
    chars: { top: '', 'top-mid': '', 'top-left': '', 'top-right': '', bottom: '', 'bottom-mid': '', 'bottom-left': '', 'bottom-right': '', left: '', 'left-mid': '', mid: '', 'mid-mid': '', right: '', 'right-mid': '', middle: '  ' },
    style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 },
  });
  output.push(...rows.map((row) => row.map((cell) => printable(String(cell)))));
  return output.toString().split('\n').map((line) => line.trimEnd()).join('\n');
}

/**
 * A cell as a terminal shows it: names, keys and payloads come from any publisher, and a control
 * character (an escape sequence, a newline) would clear the screen, set its title or forge a row.
 */
function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

const AGE = /^(\d+)([mhd])$/;
const UNIT_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** --since as the server takes it: an ISO time as given, or an age before now. */
function sinceTime(text: string): string {
  const age = AGE.exec(text);
  if (age) return new Date(Date.now() - Number(age[1]) * UNIT_MS[age[2] as keyof typeof UNIT_MS]).toISOString();
  if (Number.isNaN(Date.parse(text))) throw new UsageError(`ls rejections: --since ${text}: give an ISO time (2026-12-01T00:00:00Z) or an age such as 30m, 6h or 1d`);
  return new Date(text).toISOString();
}
