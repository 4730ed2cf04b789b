import { createHash, randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import { z } from 'zod';
import { assetNameSchema } from '../protocol/emission.js';
import { Limits } from '../protocol/limits.js';
import type { Same } from '../protocol/same-type.js';
import { echo, isPlainText, MAX_LISTED, nameList, plainText, PLAIN_TEXT_RULE } from '../protocol/text.js';

/**
 * Scoped access tokens. A token is `obx_<id>_<secret>`; the store keeps its id, its grant and a SHA-256
 * of the whole token, never the token itself, so a copy of the database lets nobody in. The secret is
 * 256 random bits: a fast hash is enough, as nobody can guess one to check against a stolen hash.
 */

export type TokenScope = 'publish' | 'read' | 'admin';
export type ReadTarget = 'events' | 'streams' | 'metrics';

/** What one token may do. */
export interface TokenGrant {
  scope: TokenScope;
  /**
   * The producers a publish token may publish as, or whose stream state a read token may read: one name,
   * a prefix ending in `*` (`ingest-*`), or `*` for all.
   */
  producers: string;
  /** The assets a publish token may emit to, or a read token may read; null for all. */
  assets: string[] | null;
  /** What a read token may read (events, stream state, the server's metrics); empty for other scopes. */
  reads: ReadTarget[];
  /**
   * The assets whose events a publish token may name as the cause of its emissions (a consumer's
   * read-process-emit); null for all (admin), empty for none.
   */
  consumes: string[] | null;
}

/** A stored token as `token list` shows it: never the secret. */
export interface TokenInfo extends TokenGrant {
  id: string;
  note: string;
  createdAt: string;
  revokedAt: string | null;
}

/** The grant of the single `--token` of earlier versions, and of a server with no token at all. */
export const ADMIN_GRANT: TokenGrant = Object.freeze({ scope: 'admin', producers: '*', assets: null, reads: [], consumes: null });

const TOKEN_SHAPE = /^obx_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;

/** A producer name, a prefix ending in `*`, or `*`; `missing` is the message when it is left out. */
const producerPattern = (missing = 'is required') =>
  z
    .string({ error: (issue) => (issue.input === undefined ? missing : 'must be a string') })
    .min(1, { error: 'must not be empty: give a producer name, a prefix ending in * (such as "ingest-*"), or * for every producer' })
    .max(Limits.maxNameLength, { error: `must be at most ${Limits.maxNameLength} characters` })
    .refine(isPlainText, { error: PLAIN_TEXT_RULE })
    .refine((pattern) => !pattern.slice(0, -1).includes('*'), {
      error: 'must be a producer name, a prefix ending in * (such as "ingest-*"), or * for every producer',
    })
    // Both rules as one pattern for the OpenAPI document: plain text, and a `*` only at the end.
    .meta({ pattern: '^[^*\\u0000]*\\*?$' });

const assetListSchema = (what: string) =>
  z.array(assetNameSchema).min(1, { error: `must name at least one asset; leave it out for ${what}` }).max(1000);
const noteSchema = plainText(z.string().max(200, { error: 'must be at most 200 characters' })).default('');
/** A field one scope does not take: refused with the reason, and `not: {}` in the OpenAPI document. */
const notTaken = (why: string) => z.never({ error: why }).optional();

/**
 * What `token create` (and `POST /v1/tokens`) takes: one shape per scope, so that the OpenAPI document
 * says exactly what the server takes.
 */
export const tokenRequestSchema = z.discriminatedUnion(
  'scope',
  [
    z.strictObject({
      scope: z.literal('publish'),
      producers: producerPattern('a publish token needs the producer it publishes as (or a prefix ending in *)'),
      assets: assetListSchema('every asset').optional(),
      consumes: assetListSchema('none').optional(),
      reads: notTaken('only a read token has reads'),
      note: noteSchema,
    }),
    z.strictObject({
      scope: z.literal('read'),
      producers: producerPattern().optional(),
      assets: assetListSchema('every asset').optional(),
      reads: z.array(z.enum(['events', 'streams', 'metrics'], { error: 'must be "events", "streams" or "metrics"' })).min(1).optional(),
      consumes: notTaken('only a publish token consumes'),
      note: noteSchema,
    }),
    z.strictObject({
      scope: z.literal('admin'),
      producers: notTaken('an admin token may do everything; it takes no producers or assets'),
      assets: notTaken('an admin token may do everything; it takes no producers or assets'),
      reads: notTaken('only a read token has reads'),
      consumes: notTaken('only a publish token consumes'),
      note: noteSchema,
    }),
  ],
  { error: 'must be "publish", "read" or "admin"' },
);
/** What `token create` and `POST /v1/tokens` take. */
export interface TokenRequest {
  scope: TokenScope;
  /**
   * Publish: required, the producer or prefix (`ingest-*`) it publishes as. Read: whose stream state it
   * reads. @defaultValue for read: '*' (every producer)
   */
  producers?: string | undefined;
  /** The assets it may publish to or read (at least one when given). @defaultValue every asset */
  assets?: string[] | undefined;
  /**
   * Read tokens only: what they read. @defaultValue ['events', 'streams'], or ['events'] alone for a token
   * limited to assets that names no producers: it reads no stream state unless told to
   */
  reads?: ReadTarget[] | undefined;
  /**
   * Publish tokens only: the assets whose events its emissions may name as their cause (a consumer's
   * `tx.emit` in response to an event). @defaultValue none
   */
  consumes?: string[] | undefined;
  /** A note for `token list`: whose it is, what for (at most 200 characters). @defaultValue '' */
  note?: string | undefined;
}
// Documented once, on the interface: each scope's shape is one of its cases, and they name the same fields.
type TokenRequestShape = z.input<typeof tokenRequestSchema>;
const everyShapeIsARequest: TokenRequestShape extends TokenRequest ? true : false = true;
const tokenRequestIsDocumented: Same<keyof TokenRequest, TokenRequestShape extends unknown ? keyof TokenRequestShape : never> = true;
void everyShapeIsARequest;
void tokenRequestIsDocumented;

/**
 * The grant a valid request describes, with its defaults: a read token reads events and streams of every
 * producer, but one limited to assets reads no stream state unless told whose; a publish token names no
 * cause unless it lists what it consumes.
 */
export function grantOf(request: z.output<typeof tokenRequestSchema>): TokenGrant {
  if (request.scope === 'admin') return { ...ADMIN_GRANT };
  const assets = request.assets ? [...new Set(request.assets)].sort() : null;
  if (request.scope === 'publish') {
    return { scope: 'publish', producers: request.producers, assets, reads: [], consumes: [...new Set(request.consumes ?? [])].sort() };
  }
  const defaultReads: ReadTarget[] = assets !== null && request.producers === undefined ? ['events'] : ['events', 'streams'];
  return {
    scope: 'read',
    producers: request.producers ?? '*',
    assets,
    reads: [...new Set<ReadTarget>(request.reads ?? defaultReads)].sort(),
    consumes: [],
  };
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** The id part of a token of ours, or undefined for anything else (such as a `--token` of old). */
export function tokenId(token: string): string | undefined {
  return TOKEN_SHAPE.exec(token)?.[1];
}

export function producerAllowed(grant: TokenGrant, producer: string): boolean {
  const pattern = grant.producers;
  return pattern.endsWith('*') ? producer.startsWith(pattern.slice(0, -1)) : producer === pattern;
}

export function assetAllowed(grant: TokenGrant, asset: string): boolean {
  return grant.assets === null || grant.assets.includes(asset);
}

/** Whether the token's emissions may name an event of `asset` as their cause. */
export function causeAllowed(grant: TokenGrant, asset: string): boolean {
  return grant.consumes === null || grant.consumes.includes(asset);
}

/**
 * Whether a token may read events at all: a read token with reads "events", or a publish token that
 * consumes some asset (a consumer reads the events it responds to, with the one token it publishes with).
 */
export function mayReadEvents(grant: TokenGrant): boolean {
  if (grant.scope === 'admin') return true;
  if (grant.scope === 'read') return grant.reads.includes('events');
  return (grant.consumes?.length ?? 0) > 0;
}

/** The assets whose events a token may read: null for all, else a read token's assets or a publish token's consumes. */
export function readableAssets(grant: TokenGrant): string[] | null {
  if (grant.scope === 'admin') return null;
  return grant.scope === 'read' ? grant.assets : (grant.consumes ?? []);
}

/**
 * One line that says what a grant allows, for refusals and `token list`: at most `most` names of each
 * list (a refusal repeats a few; the CLI, for the operator, all of them).
 */
export function describeGrant(grant: TokenGrant, most = MAX_LISTED): string {
  const assets = grant.assets === null ? 'every asset' : `assets ${nameList(grant.assets, most)}`;
  // A refusal cuts the pattern like any name it repeats; the CLI (every name) shows it whole.
  const producers = most === Number.POSITIVE_INFINITY ? grant.producers : echo(grant.producers);
  switch (grant.scope) {
    case 'admin':
      return 'admin: everything';
    case 'publish': {
      const causes = grant.consumes === null || grant.consumes.length > 0 ? `, naming events of ${grant.consumes === null ? 'every asset' : nameList(grant.consumes, most)} as causes` : '';
      return `publish as producers matching "${producers}", to ${assets}${causes}`;
    }
    case 'read': {
      const parts = [grant.reads.includes('events') ? `events of ${assets}` : undefined, grant.reads.includes('streams') ? `streams of producers matching "${producers}"` : undefined];
      const what = parts.filter((part) => part !== undefined).join('; ');
      return `read ${grant.reads.join(' and ')}${what === '' ? '' : ` (${what})`}`;
    }
  }
}

export interface TokenRow {
  id: string;
  hash: string;
  scope: string;
  producers: string;
  assets: string | null;
  reads: string;
  /** JSON: the list of assets, or null for every asset. */
  consumes: string;
  note: string;
  created_at: string;
  revoked_at: string | null;
}

/** The tokens table, the same in both stores, through kysely. */
export class TokenRegistry {
  constructor(
    private readonly db: Kysely<{ tokens: TokenRow }>,
    private readonly now: () => Date,
  ) {}

  /** Stores a new token and returns it: the only time its secret exists anywhere. */
  async create(request: TokenRequest): Promise<{ token: string; info: TokenInfo }> {
    const parsed = tokenRequestSchema.parse(request);
    const grant = grantOf(parsed);
    const id = randomBytes(8).toString('hex');
    const token = `obx_${id}_${randomBytes(32).toString('base64url')}`;
    const row: TokenRow = {
      id,
      hash: hashToken(token),
      scope: grant.scope,
      producers: grant.producers,
      assets: grant.assets === null ? null : JSON.stringify(grant.assets),
      reads: JSON.stringify(grant.reads),
      consumes: JSON.stringify(grant.consumes),
      note: parsed.note,
      created_at: this.now().toISOString(),
      revoked_at: null,
    };
    await this.db.insertInto('tokens').values(row).execute();
    return { token, info: infoOf(row) };
  }

  /** The grant of a live token, by the token itself; undefined when unknown or revoked. */
  async grantFor(token: string): Promise<TokenGrant | undefined> {
    if (tokenId(token) === undefined) return undefined;
    const row = await this.db.selectFrom('tokens').selectAll().where('hash', '=', hashToken(token)).executeTakeFirst();
    return row && row.revoked_at === null ? grantOfRow(row) : undefined;
  }

  async list(): Promise<TokenInfo[]> {
    const rows = await this.db.selectFrom('tokens').selectAll().orderBy('created_at').orderBy('id').execute();
    return rows.map(infoOf);
  }

  /** Whether any token was ever created: from then on the server asks every client for one. */
  async any(): Promise<boolean> {
    const row = await this.db.selectFrom('tokens').select('id').limit(1).executeTakeFirst();
    return row !== undefined;
  }

  /** Revokes a token by id and returns it; undefined when there is no such token. Revoking twice keeps the first time. */
  async revoke(id: string): Promise<TokenInfo | undefined> {
    await this.db.updateTable('tokens').set({ revoked_at: this.now().toISOString() }).where('id', '=', id).where('revoked_at', 'is', null).execute();
    const row = await this.db.selectFrom('tokens').selectAll().where('id', '=', id).executeTakeFirst();
    return row && infoOf(row);
  }
}

function grantOfRow(row: TokenRow): TokenGrant {
  return {
    scope: row.scope as TokenScope,
    producers: row.producers,
    assets: row.assets === null ? null : (JSON.parse(row.assets) as string[]),
    reads: JSON.parse(row.reads) as ReadTarget[],
    consumes: JSON.parse(row.consumes) as string[] | null,
  };
}

function infoOf(row: TokenRow): TokenInfo {
  return { id: row.id, ...grantOfRow(row), note: row.note, createdAt: row.created_at, revokedAt: row.revoked_at };
}
