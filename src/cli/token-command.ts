import { closeSync, existsSync, openSync, rmSync, writeSync } from 'node:fs';
import { Option, type Command } from 'commander';
import { isPostgresUrl, openDedupeStore } from '../dedupe/open-store.js';
import type { DedupeStore } from '../dedupe/store.js';
import { describeGrant, tokenRequestSchema, type TokenInfo } from '../dedupe/tokens.js';
import { describeFirstIssue } from '../protocol/emission.js';
import { OptionsError } from '../protocol/errors.js';
import { commaList, Exit, exitsWith } from './arguments.js';

/** `oncebox token create|list|revoke`: the server's scoped tokens, kept in its store. */
export function tokenCommand(program: Command): Command {
  const token = program
    .command('token')
    .summary("create, list and revoke the server's tokens")
    .description(
      "Tokens are kept in the server's store (its SQLite file or PostgreSQL database), so these commands take the " +
        "server's --db, not a URL; a running server sees a new or revoked token within its token cache (2 s). " +
        'publish tokens publish as given producers to given assets; read tokens read events, streams or metrics; admin does all.',
    )
    .addHelpText(
      'after',
      `
Examples:
  $ oncebox token create --db server.db --scope publish --producers orders-ingest --assets batch_ready --out job.token
  $ ONCEBOX_TOKEN=$(cat job.token) node my-job.js
  $ oncebox token create --db server.db --scope read --reads events --out reader.token
  $ oncebox token list --db server.db
  $ oncebox token revoke 3f2a9c… --db server.db`,
    );
  const store = (command: Command) =>
    command.requiredOption('--db <file|url>', "the server's SQLite file or postgres:// URL").option('--schema <name>', 'its PostgreSQL schema (default: oncebox)').option('--json', 'JSON, for scripts');
  store(
    token
      .command('create')
      .description('stores a new token and shows its secret this once (only a hash is kept)')
      .addOption(new Option('--scope <scope>', 'what it may do').choices(['publish', 'read', 'admin']).makeOptionMandatory())
      .option('--producers <name|prefix*>', 'publish: the producer it publishes as, or a prefix ending in *')
      .option('--assets <a,b>', 'publish: the assets it may publish to; read: the only assets it may read (default: all)', commaList)
      .option('--reads <what>', 'read: comma-separated, of events, streams, metrics', commaList)
      .option('--consumes <a,b>', "publish: the assets a consumer reads, and whose events it may name as its emissions' causes", commaList)
      .option('--note <text>', 'what it is for, shown by token list')
      .option('--out <file>', 'a new file to write it to, readable by its owner only, instead of printing it'),
  ).action(exitsWith((flags: CreateTokenOptions) => createToken(flags)));
  store(token.command('list').description('lists the tokens: id, state, scope and note, never a secret')).action(exitsWith((flags: TokenCommandOptions) => listTokens(flags)));
  store(token.command('revoke').description('revokes a token for good; servers refuse it within their token cache').argument('<id>', 'its id, as token list shows it')).action(
    exitsWith((id: string, flags: TokenCommandOptions) => revokeToken(id, flags)),
  );
  return token;
}

export interface TokenCommandOptions {
  db: string;
  schema?: string | undefined;
  json?: boolean | undefined;
}

export interface CreateTokenOptions extends TokenCommandOptions {
  scope?: string | undefined;
  producers?: string | undefined;
  assets?: string[] | undefined;
  /** events, streams, metrics. */
  reads?: string[] | undefined;
  /** The assets a publish token's consumer reads, and whose events it may name as causes. */
  consumes?: string[] | undefined;
  note?: string | undefined;
  /** A new file to write the token to (readable by its owner only), rather than printing it. */
  out?: string | undefined;
}

/**
 * `oncebox token create`: stores a scoped token and shows its secret this once. Only a hash of it is
 * kept, so a lost token cannot be shown again: revoke it and create another.
 */
export async function createToken(options: CreateTokenOptions): Promise<number> {
  const request = tokenRequestSchema.safeParse({
    scope: options.scope,
    ...(options.producers === undefined ? {} : { producers: options.producers }),
    ...(options.assets === undefined ? {} : { assets: options.assets }),
    ...(options.reads === undefined ? {} : { reads: options.reads }),
    ...(options.consumes === undefined ? {} : { consumes: options.consumes }),
    ...(options.note === undefined ? {} : { note: options.note }),
  });
  if (!request.success) {
    const { field, message } = describeFirstIssue(request.error, { input: options });
    throw new OptionsError(field, `token create: --${message}`);
  }
  return withStore(
    options,
    async (store) => {
      // The file is made before the token, so that a token is never created whose secret has nowhere to go.
      const out = options.out === undefined ? undefined : newSecretFile(options.out);
      let created;
      try {
        created = await store.tokens.create(request.data);
      } catch (error) {
        if (options.out !== undefined) rmSync(options.out);
        throw error;
      }
      const { token, info } = created;
      if (out !== undefined) {
        writeSync(out, `${token}\n`);
        closeSync(out);
      }
      const shown = options.out === undefined ? { token } : { tokenFile: options.out };
      if (options.json) {
        console.log(JSON.stringify({ ...info, ...shown }));
      } else {
        console.log(`created token ${info.id}: ${describeGrant(info, Number.POSITIVE_INFINITY)}`);
        console.log(
          options.out === undefined
            ? `${token}\nThis is the only time the token is shown: keep it in a file only its user can read; a job takes it as ONCEBOX_TOKEN, a command as --token-file FILE.`
            : `wrote it to ${options.out} (mode 0600): a job or consumer takes it as ONCEBOX_TOKEN=$(cat ${options.out}), a command as --token-file ${options.out}.`,
        );
        await warnOfUnknownAssets(store, request.data);
      }
      return 0;
    },
    true,
  );
}

/** A token may name assets the server does not accept yet; it is likely a typo, so it is said. */
async function warnOfUnknownAssets(store: DedupeStore, grant: { assets?: string[] | undefined; consumes?: string[] | undefined }): Promise<void> {
  const known = new Set(await store.listAssets());
  const unknown = [...new Set([...(grant.assets ?? []), ...(grant.consumes ?? [])])].filter((asset) => !known.has(asset));
  if (unknown.length > 0) {
    console.error(`oncebox token: note: ${unknown.join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not registered on this server yet (its --assets file, or PUT /v1/assets/NAME): check the spelling`);
  }
}

export async function listTokens(options: TokenCommandOptions): Promise<number> {
  return withStore(options, async (store) => {
    const tokens = await store.tokens.list();
    if (options.json) {
      console.log(JSON.stringify({ tokens }));
    } else if (tokens.length === 0) {
      console.log('no tokens; oncebox token create makes one');
    } else {
      for (const token of tokens) console.log(describeToken(token));
    }
    return 0;
  });
}

export async function revokeToken(id: string, options: TokenCommandOptions): Promise<number> {
  return withStore(options, async (store) => {
    const revoked = await store.tokens.revoke(id);
    if (!revoked) {
      console.error(`oncebox token revoke: no token ${id}; oncebox token list shows the ids`);
      return Exit.Failed;
    }
    console.log(options.json ? JSON.stringify(revoked) : `revoked ${describeToken(revoked)}`);
    return 0;
  });
}

function describeToken(token: TokenInfo): string {
  const state = token.revokedAt === null ? 'live' : `revoked ${token.revokedAt}`;
  const note = token.note === '' ? '' : ` (${token.note})`;
  return `${token.id}  ${state}  created ${token.createdAt}  ${describeGrant(token, Number.POSITIVE_INFINITY)}${note}`;
}

/**
 * Opens the server's store. `token list` and `revoke` need one that exists; `token create` may make it
 * (the Quickstart creates the job's token before the server's first start), and says so, since a
 * misspelt path would otherwise make a store no server reads.
 */
async function withStore(options: TokenCommandOptions, work: (store: DedupeStore) => Promise<number>, mayCreate = false): Promise<number> {
  const creating = mayCreate && !isPostgresUrl(options.db) && !existsSync(options.db);
  const store = await openDedupeStore({ db: options.db, schema: options.schema, mustExist: !mayCreate });
  if (creating) console.error(`oncebox token: ${options.db} did not exist: it is a new, empty server store now; start the server with --db ${options.db} for it to know this token`);
  try {
    return await work(store);
  } finally {
    await store.close();
  }
}

/** A new file only its owner can read; an existing one is never overwritten, as it may hold another token. */
function newSecretFile(path: string): number {
  try {
    return openSync(path, 'wx', 0o600);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code === 'EEXIST' ? 'exists (it may hold another token); name a new file' : (error as Error).message;
    throw new OptionsError('out', `token create: --out ${path} ${reason}`);
  }
}
