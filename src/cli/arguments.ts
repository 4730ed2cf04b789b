import { readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { isServerUrl } from '../client/server-urls.js';
import { tokenFromEnvironment, TOKEN_VARIABLE } from '../client/token.js';
import { MAX_STALE_RUN_AFTER_MS, MIN_STALE_RUN_AFTER_MS } from '../protocol/catalog.js';
import { OnceboxError } from '../protocol/errors.js';

/*
 * What the commands share: parsing flag values (commander calls these and turns an
 * InvalidArgumentError into a one-line error pointing to --help), where tokens come from, and the
 * exit statuses.
 */

/** How a command ends: done; failed (the message says why); wrong command line; done, but rows are dead or the process was fenced. */
export const Exit = { Ok: 0, Failed: 1, Usage: 2, NeedsAttention: 3 } as const;

let status: number = Exit.Ok;
let command = 'oncebox';

/** The command running now (`oncebox token create`), for the pointer to its --help in an error. */
export function activeCommand(): string {
  return command;
}

/** @internal Set by main before each action runs. */
export function setActiveCommand(path: string): void {
  command = path;
}

/**
 * Wraps a command's action, which resolves to the process's exit status; main exits with it once
 * commander has run the action (`actionStatus`).
 */
export function exitsWith<A extends unknown[]>(action: (...args: A) => Promise<number> | number): (...args: A) => Promise<void> {
  return async (...args: A) => {
    status = await action(...args);
  };
}

/** The exit status the last action resolved to. */
export function actionStatus(): number {
  return status;
}

/** The command line itself is wrong: one line, a pointer to --help, and exit status 2. */
export class UsageError extends OnceboxError {
  constructor(message: string) {
    super('usage', message);
  }
}

/** A flag given as a whole number above 0. */
export function wholeNumber(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value <= 0) throw new InvalidArgumentError(`must be a whole number above 0 (got ${text})`);
  return value;
}

/** A count that may be 0 (off, for a cap). */
export function countFrom0(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value)) throw new InvalidArgumentError(`must be a whole number, 0 or more (got ${text})`);
  return value;
}

/** A port: 0 (any free one) to 65535. */
export function port(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || value > 65535) throw new InvalidArgumentError(`must be 0-65535 (got ${text})`);
  return value;
}

/** A cursor: 0, or a whole number above. */
export function cursor(text: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value)) throw new InvalidArgumentError(`must be a cursor (0 or a whole number above), not "${text}"`);
  return value;
}

/** A parser of a positive number of `unit`s, as milliseconds; fractions allowed. */
function span(unit: string, unitMs: number): (text: string) => number {
  return (text) => {
    const value = Number(text);
    if (!Number.isFinite(value) || value <= 0) throw new InvalidArgumentError(`must be a positive number of ${unit} (got ${text})`);
    return Math.round(value * unitMs);
  };
}

/** A number of days, as milliseconds (0.5 is twelve hours). */
export const days = span('days', 24 * 60 * 60 * 1000);

/** A number of hours, as milliseconds. */
export const hours = span('hours', 60 * 60 * 1000);

/** `--stale-run-hours`: hours, from one minute (0.017) to ten years, the server's bounds. */
export function staleRunHours(text: string): number {
  const ms = hours(text);
  if (ms < MIN_STALE_RUN_AFTER_MS || ms > MAX_STALE_RUN_AFTER_MS) {
    throw new InvalidArgumentError(`must be from 0.017 (one minute) to 87600 (ten years) hours (got ${text})`);
  }
  return ms;
}

/** `--rate-limit MAX[/WINDOW_MS]`, or `off`. */
export function rateLimit(text: string): false | { max: number; windowMs: number } {
  if (text === 'off') return false;
  const match = /^(\d+)(?:\/(\d+))?$/.exec(text);
  if (!match || Number(match[1]) < 1) throw new InvalidArgumentError(`must be MAX or MAX/WINDOW_MS (such as 1000/10000), or off (got ${text})`);
  return { max: Number(match[1]), windowMs: match[2] === undefined ? 10_000 : Number(match[2]) };
}

/** `--trust-proxy`: addresses, CIDRs (address/bits), or proxy-addr's names (loopback, linklocal, uniquelocal). */
export function proxyAddresses(text: string): string[] {
  const parts = commaList(text);
  for (const part of parts) {
    const [address, bits, extra] = part.split('/');
    const family = isIP(address!);
    const named = ['loopback', 'linklocal', 'uniquelocal'].includes(part);
    const validBits = bits === undefined || (/^\d+$/.test(bits) && Number(bits) <= (family === 6 ? 128 : 32));
    if (!named && (family === 0 || !validBits || extra !== undefined)) {
      throw new InvalidArgumentError(`must be addresses or CIDRs of the proxies (such as 10.0.0.5,10.1.0.0/16) or loopback, linklocal, uniquelocal; "${part}" is none`);
    }
  }
  return parts;
}

/** A comma-separated list of non-empty parts. */
export function commaList(text: string): string[] {
  const parts = text.split(',').map((part) => part.trim());
  if (parts.some((part) => part === '')) throw new InvalidArgumentError(`must be comma-separated, with nothing empty between the commas (got ${text})`);
  return parts;
}

/**
 * For a repeatable --server: each use adds an http(s) URL. A misspelt one is a usage error at once, not
 * a relay that retries an address that can never answer (or, with nothing pending, says it drained).
 */
function collectServers(value: string, previous: string[] | undefined): string[] {
  // ONCEBOX_SERVER may name several instances at once, separated by commas.
  const urls = value.split(',').map((url) => url.trim());
  for (const url of urls) {
    if (!isServerUrl(url)) {
      throw new InvalidArgumentError(`must be the server's http:// or https:// URL, such as http://127.0.0.1:8787 (got ${url})`);
    }
  }
  return [...(previous ?? []), ...urls];
}

/** The variable a job reads its server from (the README's jobs do), and the commands read when --server is not given. */
export const SERVER_VARIABLE = 'ONCEBOX_SERVER';

/**
 * The --server option of every command that talks to a server: repeatable, and taken from ONCEBOX_SERVER
 * (URLs separated by commas) when not given, so that a command beside a job finds the job's server.
 */
export function serverOption(what = 'the server'): Option {
  return new Option('--server <url>', `${what}; repeat it for several instances over one database`)
    .env(SERVER_VARIABLE)
    .argParser(collectServers)
    .makeOptionMandatory();
}

/**
 * A token read from a file; the file must exist and hold one. Used for a job's or consumer's token
 * (--token-file), and for the server's admin token.
 */
export function readTokenFile(path: string, command: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new UsageError(`${command}: --token-file ${path} cannot be read: ${(error as Error).message}`);
  }
  const token = text.trim();
  if (token === '') throw new UsageError(`${command}: --token-file ${path} is empty; put the token in it`);
  // A token file others can read gives them the token: say so (token create --out writes mode 0600).
  if ((statSync(path).mode & 0o077) !== 0) {
    console.error(`oncebox ${command}: warning: --token-file ${path} can be read by other users of this machine; chmod 600 ${path}`);
  }
  return token;
}

/**
 * The token a client command sends: --token-file, else ONCEBOX_TOKEN, else --token (readable by every
 * user of the machine in ps, so taken with a warning).
 */
export function clientToken(values: { token?: string | undefined; tokenFile?: string | undefined }, command: string): string | undefined {
  if (values.tokenFile !== undefined) return readTokenFile(values.tokenFile, command);
  if (values.token !== undefined) {
    console.error(`oncebox ${command}: warning: --token is visible to every user of this machine (ps); use --token-file or ${TOKEN_VARIABLE}`);
    return values.token;
  }
  return tokenFromEnvironment();
}

/** Adds the options every command that talks to the server takes for its token. */
export function withTokenOptions(command: Command): Command {
  return command
    .option('--token-file <file>', `a file holding the token (default: the ${TOKEN_VARIABLE} environment variable)`)
    .option('--token <token>', 'the token itself: every user of the machine can read it in ps; prefer --token-file');
}

/** Resolves on SIGTERM or SIGINT: a command that runs until stopped stops cleanly then. */
export function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    let first: number | undefined;
    const stop = (signal: NodeJS.Signals) => {
      if (first === undefined) {
        first = Date.now();
        resolve(signal);
      } else if (Date.now() - first >= REPEAT_GRACE_MS) {
        // Asked again, later: the person at the terminal wants it gone. Nothing acknowledged is lost.
        process.stderr.write(`oncebox: ${signal} again: stopping at once, without the clean stop\n`);
        process.exit(130);
      }
      // Within the grace: the same Ctrl-C, passed on by npm after it reached this process too.
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    // Its starter gone is a reason to begin stopping, never a second signal: npm run passes SIGTERM on and
    // then ends, and the stop it began must not be cut short a second later.
    whenStarterEnds(() => {
      if (first === undefined) stop('SIGTERM');
    });
  });
}

/** How long after a first stop signal a second is taken for the same one, passed on by a wrapper. */
const REPEAT_GRACE_MS = 1000;

/** How often a command started by npx looks whether npx is still there. */
const STARTER_CHECK_MS = 1000;

/**
 * npx (npm exec) runs a command through `sh -c`, and when it gets SIGTERM it ends without passing the
 * signal on: a server or relay started by `npx oncebox …` would run on, orphaned, after its supervisor
 * stopped it. Started by npm, a command stops as on SIGTERM once its parent is gone (it is handed to
 * another). Not otherwise: a process left running on purpose (nohup, a shell's `&`) loses its parent too.
 */
function whenStarterEnds(stop: () => void): void {
  if (process.env.npm_command === undefined) return;
  const parent = process.ppid;
  const check = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(check);
    process.stderr.write(`oncebox: the npm process that started this one (pid ${parent}) has ended; stopping as on SIGTERM\n`);
    stop();
  }, STARTER_CHECK_MS);
  // The check alone keeps no process alive.
  check.unref();
}

/** An AbortSignal that aborts on SIGTERM or SIGINT. */
export function stopSignal(): AbortSignal {
  const stop = new AbortController();
  void untilSignal().then(() => stop.abort());
  return stop.signal;
}
