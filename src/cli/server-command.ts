import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { Command, Option } from 'commander';
import { logDestination } from '../client/logger.js';
import { TOKEN_VARIABLE } from '../client/token.js';
import { isPostgresUrl } from '../dedupe/open-store.js';
import { createServer, DEFAULT_MAX_CONNECTIONS, type ServerOptions } from '../dedupe/server.js';
import { countFrom0, days, Exit, staleRunHours, exitsWith, port, proxyAddresses, rateLimit, readTokenFile, untilSignal, UsageError, wholeNumber } from './arguments.js';

/** Where the server's admin token may come from when no --token-file is given. */
export const ADMIN_TOKEN_VARIABLE = 'ONCEBOX_ADMIN_TOKEN';

interface ServerFlags {
  db: string;
  port: number;
  host: string;
  assets?: string;
  tokenFile?: string;
  token?: string;
  durability: 'full' | 'normal';
  schema?: string;
  dedupeRetentionDays: number;
  eventRetentionDays?: number;
  streamRetentionDays?: number;
  newStreamsPerMinute?: number;
  staleRunHours?: number;
  requestTimeoutMs?: number;
  headersTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  maxConnections?: number;
  maxConnectionsPerAddress?: number;
  unauthenticatedTimeoutMs?: number;
  maxWaiters?: number;
  maxWaitersPerToken?: number;
  maxAttemptStep?: number;
  rateLimit?: false | { max: number; windowMs: number };
  trustProxy?: string[];
  json?: boolean;
}

/** `oncebox server`: the deduplicating server, on a SQLite file or a PostgreSQL database. */
export function serverCommand(program: Command): Command {
  return program
    .command('server')
    .summary('run the deduplicating server')
    .description(
      'Runs the oncebox server on a SQLite file, or on PostgreSQL for several instances behind a load balancer. ' +
        `Its admin token comes from --token-file or ${ADMIN_TOKEN_VARIABLE}; jobs get tokens of their own from \`oncebox token create\`. ` +
        'Once an admin token or any token exists, every request but /healthz, /openapi.json and the web console\'s files needs one. ' +
        'The web console is at /console/ (a read token with reads events,streams opens it; docs/console.md).',
    )
    .requiredOption('--db <file|url>', 'a SQLite file, or a postgres:// URL (password in PGPASSWORD or ~/.pgpass, not in the URL)')
    .option('--port <n>', 'the port to listen on; 0 takes any free one', port, 8787)
    .option('--host <address>', 'the address to listen on; anything but loopback is reachable from other machines', '127.0.0.1')
    .option('--assets <file>', 'the assets it accepts: one name per line (# comments), or a JSON array')
    .option('--token-file <file>', `a file holding the admin token (default: the ${ADMIN_TOKEN_VARIABLE} environment variable)`)
    .option('--token <token>', 'the admin token itself: every user of the machine can read it in ps; prefer --token-file')
    .addOption(new Option('--durability <level>', "'full' fsyncs every acknowledged batch (SQLite)").choices(['full', 'normal']).default('full'))
    .option('--schema <name>', "PostgreSQL schema of oncebox's tables (default: oncebox)")
    .addOption(new Option('--dedupe-retention-days <days>', 'how long dedupe records are kept: longer than any retry horizon').argParser(days).default(days('30'), '30'))
    .option('--event-retention-days <days>', 'how long events are kept (default: forever)', days)
    .option('--stream-retention-days <days>', "how long a run's stream state is kept after its last request (default: the dedupe retention)", days)
    .option('--stale-run-hours <hours>', 'how long a run with no end may make no request before the console shows it stale, not running (default: 24)', staleRunHours)
    .option('--new-streams-per-minute <n>', 'new runs one token may open per minute (default: 1200)', wholeNumber)
    .option('--request-timeout-ms <ms>', 'longest time a client may take to send a request (default: 30000)', wholeNumber)
    .option('--headers-timeout-ms <ms>', 'longest time a client may take to send its headers (default: 10000)', wholeNumber)
    .option('--keep-alive-timeout-ms <ms>', 'how long an idle keep-alive connection stays open (default: 5000)', wholeNumber)
    .option('--max-connections <n>', 'connections open at once (default: 512)', wholeNumber)
    .option('--max-connections-per-address <n>', 'connections one source address may hold at once; 0 for no cap, behind a proxy (default: 128)', countFrom0)
    .option('--unauthenticated-timeout-ms <ms>', 'how long a connection may stay open before a request on it presents a live token (default: 5000)', wholeNumber)
    .option('--max-waiters <n>', 'waiting reads (long-polls) held at once (default: half of --max-connections)', wholeNumber)
    .option('--max-waiters-per-token <n>', 'waiting reads one token may hold (default: 32)', wholeNumber)
    .option('--max-attempt-step <n>', "how far above a run's highest attempt a new one may be (default: 1000)", wholeNumber)
    .option('--rate-limit <max[/window-ms]|off>', 'requests one token may make per window (default: 1000/10000)', rateLimit)
    .option('--trust-proxy <addresses>', "comma-separated addresses or CIDRs of proxies whose X-Forwarded-For names the client", proxyAddresses)
    .option('--json', 'print the start line as JSON even on a terminal (it is JSON elsewhere)')
    .addHelpText(
      'after',
      `
Examples:
  $ oncebox token create --db server.db --scope publish --producers orders-ingest --assets batch_ready --out job.token
  $ oncebox server --db server.db --assets assets.txt --token-file admin.token
  $ PGPASSWORD=… oncebox server --db postgres://oncebox@db.internal/oncebox --host 0.0.0.0 --token-file admin.token

Stops cleanly on SIGTERM or SIGINT: requests in flight finish, nothing acknowledged is lost.
Every flag and variable, with production advice: docs/production.md.`,
    )
    .action(exitsWith((flags: ServerFlags) => serve(flags)));
}

async function serve(flags: ServerFlags): Promise<number> {
  // Listened for before anything starts: a SIGTERM right after the start line must stop it cleanly, not
  // find no handler and kill it mid-way.
  const stopped = untilSignal();
  const token = adminToken(flags);
  const options: ServerOptions = {
    db: flags.db,
    assets: flags.assets === undefined ? [] : readAssets(flags.assets),
    token,
    durability: flags.durability,
    schema: flags.schema,
    dedupeRetentionMs: flags.dedupeRetentionDays,
    eventRetentionMs: flags.eventRetentionDays ?? null,
    streamRetentionMs: flags.streamRetentionDays,
    newStreamsPerMinute: flags.newStreamsPerMinute,
    staleRunAfterMs: flags.staleRunHours,
    requestTimeoutMs: flags.requestTimeoutMs,
    headersTimeoutMs: flags.headersTimeoutMs,
    keepAliveTimeoutMs: flags.keepAliveTimeoutMs,
    maxConnections: flags.maxConnections,
    maxConnectionsPerAddress: flags.maxConnectionsPerAddress,
    unauthenticatedTimeoutMs: flags.unauthenticatedTimeoutMs,
    maxWaiters: flags.maxWaiters,
    maxWaitersPerToken: flags.maxWaitersPerToken,
    maxAttemptStep: flags.maxAttemptStep,
    rateLimit: flags.rateLimit,
    trustProxy: flags.trustProxy,
    logger: { level: process.env.ONCEBOX_LOG_LEVEL ?? 'warn', stream: logDestination() },
  };
  if (flags.streamRetentionDays !== undefined && flags.streamRetentionDays < flags.dedupeRetentionDays) {
    // A retry after its run's stream state is gone starts the stream anew: no checkpoint copy to resume from.
    console.error('oncebox server: warning: --stream-retention-days is shorter than --dedupe-retention-days; keep a run\'s stream state at least as long as its keys (docs/operations.md, Retention)');
  }
  const maxConnections = flags.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  if (flags.maxWaiters !== undefined && flags.maxWaiters >= maxConnections) {
    // Waiting reads holding every connection leave none for the jobs publishing: readers would block writers.
    console.error(
      `oncebox server: warning: --max-waiters ${flags.maxWaiters} is not below --max-connections ${maxConnections}: waiting reads could hold every connection ` +
        'and leave none for jobs publishing; keep it well below (the default is half)',
    );
  }
  const server = await createServer(options);
  const url = await server.listen({ port: flags.port, host: flags.host });
  const auth = token !== undefined || (await server.store.tokens.any());
  const assets = await server.store.listAssets();
  const json = flags.json || !process.stdout.isTTY;
  if (json) {
    console.log(JSON.stringify({ event: 'listening', url, console: `${url}/console/`, db: withoutPassword(flags.db), auth: auth ? 'on' : 'off', assets }));
  } else {
    console.log(
      `oncebox server listening on ${url}\n` +
        `  store   ${withoutPassword(flags.db)}\n` +
        `  auth    ${auth ? `on (${token === undefined ? 'tokens in the store' : 'an admin token, and tokens in the store'})` : 'off: anyone who reaches the port may publish and read'}\n` +
        `  assets  ${assets.length === 0 ? 'none yet: jobs are refused until some are registered (--assets, or PUT /v1/assets/NAME)' : assets.join(', ')}\n` +
        `  console ${url}/console/ (with a read token: oncebox token create --scope read --reads events,streams)\n` +
        '  stop    Ctrl-C (requests in flight finish first)',
    );
  }
  if (!auth && !isLoopback(flags.host)) {
    console.error(
      `oncebox server: warning: listening on ${flags.host} with no token: anyone who can reach it may publish and read. ` +
        `Give it an admin token (--token-file, or ${ADMIN_TOKEN_VARIABLE}) and create tokens for the jobs (oncebox token create)`,
    );
  }
  const signal = await stopped;
  // Said as it happens: a supervisor's log shows that the server was told to stop, and that it did.
  console.log(json ? JSON.stringify({ event: 'stopping', signal }) : `oncebox server: ${signal}: stopping; requests in flight finish first`);
  // Stop taking requests, finish those in flight, then close the store: nothing acknowledged is lost.
  await server.close();
  console.log(json ? JSON.stringify({ event: 'stopped' }) : 'oncebox server: stopped');
  return Exit.Ok;
}

/**
 * The admin token: --token-file, else ONCEBOX_ADMIN_TOKEN, else --token (with a warning). ONCEBOX_TOKEN
 * is the jobs' variable: a server started in a job's environment must not take the job's token as its
 * admin token, so it is left alone, and said so.
 */
function adminToken(flags: ServerFlags): string | undefined {
  if (flags.tokenFile !== undefined) return readTokenFile(flags.tokenFile, 'server');
  const fromEnvironment = process.env[ADMIN_TOKEN_VARIABLE]?.trim();
  if (fromEnvironment) return fromEnvironment;
  if (flags.token !== undefined) {
    console.error(`oncebox server: warning: --token is visible to every user of this machine (ps); use --token-file or ${ADMIN_TOKEN_VARIABLE}`);
    return flags.token;
  }
  if (process.env[TOKEN_VARIABLE]) {
    console.error(`oncebox server: note: ${TOKEN_VARIABLE} is set, but it is the jobs' token; the server's admin token comes from --token-file or ${ADMIN_TOKEN_VARIABLE}`);
  }
  return undefined;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

/** The --db value as it may be printed: a PostgreSQL URL loses its password. */
function withoutPassword(db: string): string {
  if (!isPostgresUrl(db)) return db;
  const url = new URL(db);
  if (url.password) url.password = '***';
  return url.toString();
}

/** A file of asset names: a JSON array, or one name per line (blank lines and # comments ignored). */
function readAssets(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new UsageError(`server: --assets ${path} cannot be read: ${(error as Error).message}`);
  }
  if (text.trimStart().startsWith('[')) return JSON.parse(text) as string[];
  return text
    .split('\n')
    .map((line) => line.replace(/#.*/, '').trim())
    .filter(Boolean);
}
