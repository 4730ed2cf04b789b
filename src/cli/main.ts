#!/usr/bin/env node
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { isPostgresUrl } from '../dedupe/open-store.js';
import { createServer } from '../dedupe/server.js';
import { OnceboxError } from '../protocol/errors.js';
import { packageVersion } from '../protocol/version.js';
import { runRelay } from './relay-command.js';
import { runForwardAirflow } from './forward-command.js';
import { printEvents } from './events-command.js';
import { printStatus } from './status-command.js';
import { DeadUsageError, runDeadCommand } from './dead-command.js';
import { createToken, listTokens, revokeToken } from './token-command.js';

/** Each command's usage, as `oncebox COMMAND --help` prints it; `oncebox --help` prints them all. */
const COMMAND_USAGE: Record<string, string> = {
  server: `  oncebox server --db FILE|postgres://… [--port 8787] [--host 127.0.0.1] [--assets FILE] [--token-file FILE]
                 [--durability full|normal] [--schema oncebox] [--dedupe-retention-days 30] [--event-retention-days N] [--stream-retention-days 30]
                 [--request-timeout-ms 30000] [--headers-timeout-ms 10000] [--keep-alive-timeout-ms 5000]
                 [--max-connections 512] [--max-waiters 256] [--max-waiters-per-token 32] [--max-attempt-step 1000] [--rate-limit 1000/10000|off]
                 [--new-streams-per-minute 1200] [--trust-proxy ADDRESS,CIDR…]`,
  relay: '  oncebox relay  --db FILE --server URL [--server URL2 …] [--token-file FILE] [--drain]',
  status: '  oncebox status FILE [--json]',
  events: '  oncebox events --server URL [--server URL2 …] [--asset A] [--after CURSOR] [--follow] [--json] [--token-file FILE]',
  dead: `  oncebox dead list FILE [--json]
  oncebox dead show FILE --id N [--json]
  oncebox dead retry FILE (--id N … | --all) [--note TEXT] [--json]
  oncebox dead discard FILE (--id N … | --all) [--note TEXT] [--json]`,
  forward: `  oncebox forward airflow --server URL [--server URL2 …] --airflow URL --map FILE [--db FILE] [--group airflow-forwarder]
                          [--token-file FILE] [--airflow-credentials-file FILE] [--batch-size 20] [--settle-ms 1000]`,
  token: `  oncebox token create --db FILE|postgres://… --scope publish|read|admin [--producers NAME|PREFIX*]
                       [--assets A,B] [--reads events,streams,metrics] [--consumes A,B] [--note TEXT] [--out FILE] [--schema S] [--json]
  oncebox token list   --db FILE|postgres://… [--schema S] [--json]
  oncebox token revoke ID --db FILE|postgres://… [--schema S] [--json]`,
};

const USAGE = `usage:
${Object.values(COMMAND_USAGE).join('\n')}
  oncebox --version

The token comes from --token-file or ONCEBOX_TOKEN. --token TOKEN works too, but every user of the
machine can read it in ps. Airflow credentials come from --airflow-credentials-file or
ONCEBOX_AIRFLOW_USERNAME and ONCEBOX_AIRFLOW_PASSWORD (or ONCEBOX_AIRFLOW_TOKEN). See docs/security.md,
docs/operations.md for every command, and docs/airflow.md.`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command !== undefined && COMMAND_USAGE[command] !== undefined && (rest.includes('--help') || rest.includes('-h'))) {
    console.log(`usage:\n${COMMAND_USAGE[command]}`);
    return 0;
  }
  switch (command) {
    case '--version':
    case '-v':
    case 'version':
      console.log(packageVersion());
      return 0;
    case 'server':
      return serve(rest);
    case 'relay':
      return relay(rest);
    case 'status':
      return status(rest);
    case 'events':
      return events(rest);
    case 'token':
      return token(rest);
    case 'dead':
      return dead(rest);
    case 'forward':
      return forward(rest);
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      console.log(USAGE);
      return command === undefined ? 2 : 0;
    default:
      console.error(`oncebox: unknown command "${command}"\n${USAGE}`);
      return 2;
  }
}

async function serve(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      db: { type: 'string' },
      port: { type: 'string', default: '8787' },
      host: { type: 'string', default: '127.0.0.1' },
      assets: { type: 'string' },
      token: { type: 'string' },
      'token-file': { type: 'string' },
      durability: { type: 'string', default: 'full' },
      schema: { type: 'string' },
      'dedupe-retention-days': { type: 'string', default: '30' },
      'event-retention-days': { type: 'string' },
      'stream-retention-days': { type: 'string' },
      'new-streams-per-minute': { type: 'string' },
      'request-timeout-ms': { type: 'string' },
      'headers-timeout-ms': { type: 'string' },
      'keep-alive-timeout-ms': { type: 'string' },
      'max-connections': { type: 'string' },
      'max-waiters': { type: 'string' },
      'max-waiters-per-token': { type: 'string' },
      'max-attempt-step': { type: 'string' },
      'rate-limit': { type: 'string' },
      'trust-proxy': { type: 'string' },
    },
  });
  if (!values.db) throw new UsageError("server: --db is required: a SQLite file, or a postgres:// URL");
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`server: --port must be 0-65535 (got ${values.port})`);
  const server = await createServer({
    db: values.db,
    assets: values.assets ? readAssets(values.assets) : [],
    token: tokenFrom(values, 'server'),
    durability: values.durability as 'full' | 'normal',
    schema: values.schema,
    dedupeRetentionMs: days(values['dedupe-retention-days'], 'dedupe-retention-days'),
    eventRetentionMs: values['event-retention-days'] === undefined ? null : days(values['event-retention-days'], 'event-retention-days'),
    ...(values['stream-retention-days'] === undefined ? {} : { streamRetentionMs: days(values['stream-retention-days'], 'stream-retention-days') }),
    ...wholeNumber(values['new-streams-per-minute'], 'new-streams-per-minute', 'newStreamsPerMinute'),
    logger: { level: process.env.ONCEBOX_LOG_LEVEL ?? 'warn' },
    ...wholeNumber(values['request-timeout-ms'], 'request-timeout-ms', 'requestTimeoutMs'),
    ...wholeNumber(values['headers-timeout-ms'], 'headers-timeout-ms', 'headersTimeoutMs'),
    ...wholeNumber(values['keep-alive-timeout-ms'], 'keep-alive-timeout-ms', 'keepAliveTimeoutMs'),
    ...wholeNumber(values['max-connections'], 'max-connections', 'maxConnections'),
    ...wholeNumber(values['max-waiters'], 'max-waiters', 'maxWaiters'),
    ...wholeNumber(values['max-waiters-per-token'], 'max-waiters-per-token', 'maxWaitersPerToken'),
    ...wholeNumber(values['max-attempt-step'], 'max-attempt-step', 'maxAttemptStep'),
    ...(values['rate-limit'] === undefined ? {} : { rateLimit: rateLimitFrom(values['rate-limit']) }),
    ...(values['trust-proxy'] === undefined ? {} : { trustProxy: trustProxyFrom(values['trust-proxy']) }),
  });
  const url = await server.listen({ port, host: values.host });
  console.log(JSON.stringify({ event: 'listening', url, db: withoutPassword(values.db), assets: await server.store.listAssets() }));
  await untilSignal();
  // Stop taking requests, finish those in flight, then close the store: nothing acknowledged is lost.
  await server.close();
  return 0;
}

async function relay(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      db: { type: 'string' },
      server: { type: 'string', multiple: true },
      token: { type: 'string' },
      'token-file': { type: 'string' },
      drain: { type: 'boolean', default: false },
    },
  });
  if (!values.db || !values.server?.length) throw new UsageError('relay: --db FILE and --server URL are required');
  const stop = new AbortController();
  void untilSignal().then(() => stop.abort());
  return runRelay({ db: values.db, servers: values.server, token: tokenFrom(values, 'relay'), drain: values.drain, signal: stop.signal });
}

async function forward(args: string[]): Promise<number> {
  const [target, ...rest] = args;
  if (target !== 'airflow') throw new UsageError(`forward: the only target is "airflow" (got ${target === undefined ? 'none' : `"${target}"`})`);
  const { values } = parseArgs({
    args: rest,
    strict: true,
    options: {
      server: { type: 'string', multiple: true },
      airflow: { type: 'string' },
      map: { type: 'string' },
      db: { type: 'string', default: '.oncebox/airflow-forwarder.db' },
      group: { type: 'string', default: 'airflow-forwarder' },
      token: { type: 'string' },
      'token-file': { type: 'string' },
      'airflow-credentials-file': { type: 'string' },
      'settle-ms': { type: 'string' },
      'batch-size': { type: 'string' },
    },
  });
  if (!values.server?.length || !values.airflow || !values.map) {
    throw new UsageError('forward airflow: --server URL, --airflow URL and --map FILE are required');
  }
  const stop = new AbortController();
  void untilSignal().then(() => stop.abort());
  mkdirSync(dirname(values.db!), { recursive: true });
  return runForwardAirflow({
    servers: values.server,
    airflow: values.airflow,
    mapFile: values.map,
    db: values.db!,
    group: values.group!,
    token: tokenFrom(values, 'forward'),
    credentialsFile: values['airflow-credentials-file'],
    settleMs: wholeNumber(values['settle-ms'], 'settle-ms', 'settleMs').settleMs,
    batchSize: wholeNumber(values['batch-size'], 'batch-size', 'batchSize').batchSize,
    signal: stop.signal,
  });
}

async function events(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      server: { type: 'string', multiple: true },
      asset: { type: 'string' },
      after: { type: 'string', default: '0' },
      follow: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      token: { type: 'string' },
      'token-file': { type: 'string' },
    },
  });
  if (!values.server?.length) throw new UsageError('events: --server URL is required');
  const after = Number(values.after);
  if (!Number.isSafeInteger(after) || after < 0) throw new UsageError(`events: --after must be a cursor (0 or a whole number above), not "${values.after}"`);
  const stop = new AbortController();
  void untilSignal().then(() => stop.abort());
  return printEvents({ servers: values.server, token: tokenFrom(values, 'events'), asset: values.asset, after, follow: values.follow, json: values.json, signal: stop.signal });
}

async function status(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, strict: true, allowPositionals: true, options: { json: { type: 'boolean', default: false } } });
  if (positionals.length !== 1) throw new UsageError('status: give exactly one outbox FILE');
  return printStatus(positionals[0]!, values.json);
}

async function token(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values, positionals } = parseArgs({
    args: rest,
    strict: true,
    allowPositionals: action === 'revoke',
    options: {
      db: { type: 'string' },
      schema: { type: 'string' },
      json: { type: 'boolean', default: false },
      scope: { type: 'string' },
      producers: { type: 'string' },
      assets: { type: 'string' },
      reads: { type: 'string' },
      consumes: { type: 'string' },
      note: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const { db, schema, json, ...grant } = values;
  if (!db) throw new UsageError(`token ${action ?? ''}: --db is required: the server's SQLite file or postgres:// URL`);
  const given = Object.keys(grant);
  if (action !== 'create' && given.length > 0) throw new UsageError(`token ${action ?? ''}: --${given[0]} is an option of token create only`);
  const where = { db, schema, json };
  switch (action) {
    case 'create':
      return createToken({ ...where, ...grant });
    case 'list':
      return listTokens(where);
    case 'revoke':
      if (positionals.length !== 1) throw new UsageError('token revoke: give exactly one token ID (oncebox token list shows them)');
      return revokeToken(positionals[0]!, where);
    default:
      throw new UsageError(`token: say create, list or revoke (got ${action === undefined ? 'nothing' : `"${action}"`})`);
  }
}

async function dead(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values, positionals } = parseArgs({
    args: rest,
    strict: true,
    allowPositionals: true,
    options: {
      id: { type: 'string', multiple: true, default: [] },
      all: { type: 'boolean', default: false },
      note: { type: 'string', default: '' },
      json: { type: 'boolean', default: false },
    },
  });
  if (positionals.length !== 1) throw new UsageError(`dead ${action ?? ''}: give exactly one outbox FILE`);
  const ids = values.id.map((text) => {
    const id = Number(text);
    if (!Number.isInteger(id) || id < 1) throw new UsageError(`dead ${action}: --id must be a row number such as 12 (got ${text})`);
    return id;
  });
  try {
    return runDeadCommand(action, { path: positionals[0]!, ids, all: values.all, note: values.note, json: values.json });
  } catch (error) {
    if (error instanceof DeadUsageError) throw new UsageError(error.message);
    throw error;
  }
}

/** --rate-limit MAX[/WINDOW_MS], or off. */
function rateLimitFrom(text: string): false | { max: number; windowMs: number } {
  if (text === 'off') return false;
  const match = /^(\d+)(?:\/(\d+))?$/.exec(text);
  if (!match || Number(match[1]) < 1) throw new UsageError(`server: --rate-limit must be MAX or MAX/WINDOW_MS (such as 1000/10000), or off (got ${text})`);
  return { max: Number(match[1]), windowMs: match[2] === undefined ? 10_000 : Number(match[2]) };
}

/** --trust-proxy: the proxies' addresses and CIDRs, comma-separated. */
function trustProxyFrom(text: string): string[] {
  const proxies = text.split(',').map((part) => part.trim());
  if (proxies.some((part) => part === '')) throw new UsageError(`server: --trust-proxy must be the proxies' addresses or CIDRs, comma-separated (got ${text})`);
  return proxies;
}

/** The --db value as it may be printed: a PostgreSQL URL loses its password. */
function withoutPassword(db: string): string {
  if (!isPostgresUrl(db)) return db;
  const url = new URL(db);
  if (url.password) url.password = '***';
  return url.toString();
}

/**
 * The token, from --token-file, ONCEBOX_TOKEN or --token, in that order. A token on the command line is
 * readable by every user of the machine (ps), so it is taken with a warning.
 */
function tokenFrom(values: { token?: string | undefined; 'token-file'?: string | undefined }, command: string): string | undefined {
  if (values['token-file'] !== undefined) {
    let text: string;
    try {
      text = readFileSync(values['token-file'], 'utf8');
    } catch (error) {
      throw new UsageError(`${command}: --token-file ${values['token-file']} cannot be read: ${(error as Error).message}`);
    }
    const token = text.trim();
    if (token === '') throw new UsageError(`${command}: --token-file ${values['token-file']} is empty; put the token in it`);
    return token;
  }
  if (values.token !== undefined) {
    console.error(`oncebox ${command}: warning: --token is visible to every user of this machine (ps); use --token-file or ONCEBOX_TOKEN`);
    return values.token;
  }
  return process.env.ONCEBOX_TOKEN;
}

/** A flag given as a whole number, as the option it sets; nothing when the flag is absent. */
function wholeNumber<K extends string>(text: string | undefined, flag: string, option: K): Partial<Record<K, number>> {
  if (text === undefined) return {};
  const value = Number(text);
  if (!Number.isInteger(value) || value <= 0) throw new UsageError(`--${flag} must be a whole number above 0 (got ${text})`);
  return { [option]: value } as Partial<Record<K, number>>;
}

function days(text: string, flag: string): number {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new UsageError(`server: --${flag} must be a positive number of days (got ${text})`);
  return Math.round(value * 24 * 60 * 60 * 1000);
}

/** A file of asset names: a JSON array, or one name per line (blank lines and # comments ignored). */
function readAssets(path: string): string[] {
  const text = readFileSync(path, 'utf8');
  if (text.trimStart().startsWith('[')) return JSON.parse(text) as string[];
  return text
    .split('\n')
    .map((line) => line.replace(/#.*/, '').trim())
    .filter(Boolean);
}

function untilSignal(): Promise<void> {
  return new Promise((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
  });
}

/** The command line itself is wrong: the usage is printed, and the exit status is 2. */
class UsageError extends OnceboxError {
  constructor(message: string) {
    super('usage', message);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof UsageError || (error as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      console.error(`oncebox: ${(error as Error).message}\n${USAGE}`);
      process.exit(2);
    }
    const code = error instanceof OnceboxError ? ` [${error.code}]` : '';
    console.error(`oncebox: ${(error as Error).message}${code}`);
    process.exit(1);
  },
);
