import { z } from 'zod';
import { canonicalJson, NonJsonValue } from './canonical-json.js';
import { Limits } from './limits.js';
import { echo, isPlainText, MAX_ECHO, PLAIN_TEXT_PATTERN, PLAIN_TEXT_RULE } from './text.js';

/**
 * The rules for an emission's payload, applied by the producer at commit and again by the server on
 * each item, with the same messages on both sides. Each message names the field, the limit and the fix.
 */

const ASSET_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$/;
/** ISO 8601 date-time with a mandatory `Z` or `±hh:mm` offset; seconds and fractions optional. */
const ZONED_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:Z|[+-](\d{2}):(\d{2}))$/;

export const assetNameSchema = z
  .string({ error: 'must be a string, the name of a registered asset such as "batch_ready"' })
  .min(1, { error: 'must not be empty; give the name of a registered asset such as "batch_ready"' })
  .max(Limits.maxAssetNameLength, {
    error: `must be at most ${Limits.maxAssetNameLength} characters; use a shorter asset name`,
  })
  .regex(ASSET_NAME, {
    error: 'must start with a letter or digit and use only letters, digits and _ . : / @ + -',
  });

export const partitionKeySchema = z
  .string({ error: 'must be a string such as "batch-0042"' })
  .min(1, { error: 'must not be empty; leave it out for an event without a partition' })
  .max(Limits.maxPartitionKeyLength, {
    error: `must be at most ${Limits.maxPartitionKeyLength} characters; use a shorter partition key`,
  })
  .refine(isPlainText, { error: PLAIN_TEXT_RULE })
  .meta({ pattern: PLAIN_TEXT_PATTERN });

export const partitionDateSchema = z
  .string({ error: 'must be an ISO 8601 date-time string with an offset or Z, e.g. "2026-11-30T00:00:00Z"' })
  .refine(isZonedDateTime, {
    error: (issue) =>
      `must be an ISO 8601 date-time with an explicit offset or Z, e.g. "2026-11-30T00:00:00Z" (got ${JSON.stringify(echo(String(issue.input)))})`,
  });

function isZonedDateTime(text: string): boolean {
  const match = ZONED_DATE_TIME.exec(text);
  if (!match) return false;
  const [, y, mo, d, h, mi, s, oh, om] = match.map((part) => (part === undefined ? 0 : Number(part)));
  const day = new Date(Date.UTC(y!, mo! - 1, d!));
  const realDay = day.getUTCFullYear() === y && day.getUTCMonth() === mo! - 1 && day.getUTCDate() === d;
  return realDay && h! <= 23 && mi! <= 59 && s! <= 59 && oh! <= 23 && om! <= 59;
}

/**
 * `extra`: a plain JSON object of at most `maxExtraBytes`. It parses to its canonical JSON text, which
 * is what is stored, sent and fingerprinted, so the value is walked once.
 */
export function extraSchema(maxExtraBytes: number) {
  return z.custom<Record<string, unknown>>().transform((value, ctx): string => {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      ctx.addIssue({ code: 'custom', message: 'must be a JSON object such as { "rows": 1200 }' });
      return z.NEVER;
    }
    let json: string;
    try {
      json = canonicalJson(value);
    } catch (error) {
      if (!(error instanceof NonJsonValue)) throw error;
      ctx.addIssue({ code: 'custom', path: pathOf(error.path), message: error.problem });
      return z.NEVER;
    }
    const bytes = Buffer.byteLength(json, 'utf8');
    if (bytes > maxExtraBytes) {
      ctx.addIssue({
        code: 'custom',
        message:
          `must be at most ${maxExtraBytes} bytes as JSON (got ${bytes}); ` +
          'keep large data elsewhere and put a reference to it in extra',
      });
      return z.NEVER;
    }
    return json;
  });
}

function pathOf(dotted: string): (string | number)[] {
  return dotted
    .split(/\.|\[(\d+)\]/)
    .filter((part) => part !== undefined && part !== '')
    .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
}

/** The payload of one emission as validated: what the downstream receives. */
export interface EmissionPayload {
  asset: string;
  partitionKey?: string | undefined;
  partitionDate?: string | undefined;
  /** `extra` as canonical JSON text. */
  extra?: string | undefined;
}

export function emissionPayloadSchema(maxExtraBytes: number = Limits.maxExtraBytes) {
  return z
    .strictObject({
      asset: assetNameSchema,
      partitionKey: partitionKeySchema.optional(),
      partitionDate: partitionDateSchema.optional(),
      extra: extraSchema(maxExtraBytes).optional(),
    })
    .superRefine((value, ctx) => {
      if (value.partitionDate !== undefined && value.partitionKey === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['partitionDate'],
          message: 'requires partitionKey; give the partition key this date belongs to',
        });
      }
    });
}

export interface FieldProblem {
  field: string;
  message: string;
}

/** Turns zod's first issue into one sentence that starts with the field it is about. */
export function describeFirstIssue(
  error: z.ZodError,
  { input, prefix = '', knownKeys }: { input: unknown; prefix?: string; knownKeys?: KnownKeys },
): FieldProblem {
  // A misspelt name also shows up as a missing one; naming the misspelling is what helps.
  const issue = firstOf(error.issues.find((candidate) => candidate.code === 'unrecognized_keys') ?? error.issues[0]!);
  const base = formatPath(prefix, issue.path);
  if (issue.code === 'unrecognized_keys') {
    const unknown = issue.keys[0]!;
    const name = formatPath(base, [unknown]);
    const known = typeof knownKeys === 'function' ? knownKeys(issue.path) : knownKeys;
    // A spelling suggestion costs time in the square of the name's length: only short names get one.
    const suggestion = known && unknown.length <= MAX_ECHO ? closest(unknown, known) : undefined;
    const hint = suggestion
      ? `did you mean "${suggestion}"?`
      : known
        ? `known fields are ${known.join(', ')}`
        : 'check the spelling';
    return { field: name, message: `${name}: unknown field; ${hint}` };
  }
  const field = base || 'body';
  // zod's own wording for a missing field ("Invalid input: expected …") says less than "is required"; a
  // schema's own message for it says more, and is kept.
  if (issue.code === 'invalid_type' && valueAt(input, issue.path) === undefined && issue.message.startsWith('Invalid input')) {
    return { field, message: `${field}: is required` };
  }
  return { field, message: `${field}: ${issue.message}` };
}

/**
 * The issue to tell of: for a value that matches no shape of a union, the first issue of the shape it
 * came nearest to (one whose fields it has, so not refused for an unknown field), under the union's path.
 */
function firstOf(issue: z.core.$ZodIssue): z.core.$ZodIssue {
  // A union with a message of its own says it better than any one of its shapes.
  if (issue.code !== 'invalid_union' || issue.errors.length === 0 || issue.message !== 'Invalid input') return issue;
  const branches = issue.errors.filter((branch) => branch.length > 0);
  const nearest = branches.find((branch) => branch.every((inner) => inner.code !== 'unrecognized_keys')) ?? branches[0];
  if (nearest === undefined) return issue;
  const inner = nearest[0]!;
  return firstOf({ ...inner, path: [...issue.path, ...inner.path] } as z.core.$ZodIssue);
}

/** The field names allowed where an unknown one was found: a list, or a lookup by the issue's path. */
export type KnownKeys = readonly string[] | ((path: readonly PropertyKey[]) => readonly string[] | undefined);

/** `extra.rows[2].id` style: dots between names, brackets around indexes. */
function formatPath(prefix: string, path: readonly PropertyKey[]): string {
  let text = prefix;
  for (const step of path) {
    if (typeof step === 'number') text += `[${step}]`;
    else text = text === '' ? echo(String(step)) : `${text}.${echo(String(step))}`;
  }
  return text;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const step of path) {
    if (value === null || typeof value !== 'object' || !Object.hasOwn(value, step)) return undefined;
    value = (value as Record<PropertyKey, unknown>)[step];
  }
  return value;
}

/** @internal The known name nearest to a misspelt one, if it is near enough to be the likely intent. */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.max(2, Math.floor(word.length / 3)) + 1;
  for (const candidate of candidates) {
    const distance = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}
