import type { z } from 'zod';

/**
 * The one rule for every string of the protocol, on both sides and in both stores: well-formed UTF-16
 * (no unpaired surrogate half, which UTF-8 cannot hold: SQLite would store U+FFFD in its place) and no
 * NUL (PostgreSQL text cannot hold it). A producer refuses such a string at commit; the server refuses
 * the item that holds it.
 */
// In a `u` regex a surrogate pair is one code point, so `\p{Cs}` matches only an unpaired half.
const NOT_PLAIN = /[\p{Cs}\u0000]/u;

export function isPlainText(text: string): boolean {
  return !NOT_PLAIN.test(text);
}

/**
 * The rule as a JSON Schema pattern, for the OpenAPI document: no NUL. The other half of the rule, no
 * unpaired surrogate half, is what JSON Schema assumes of every string already (a string is a sequence of
 * Unicode code points), and a pattern for it is one that schema-driven tools cannot generate from.
 */
export const PLAIN_TEXT_PATTERN = '^[^\\u0000]*$';

/** Why a string breaks the rule, said the same way wherever it is found. */
export const PLAIN_TEXT_RULE = 'must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters';

/** Most characters of a client's own input repeated in an answer. */
export const MAX_ECHO = 64;

/**
 * A piece of client input as an answer repeats it: cut to MAX_ECHO characters, so that a huge field name
 * or value cannot make the answer huge too, and with NUL and unpaired surrogates shown as U+FFFD, so that
 * the answer (which the server records for a retry) is plain text itself.
 */
export function echo(text: string, most = MAX_ECHO): string {
  const shown = text.length <= most ? text : `${text.slice(0, most)}… (${text.length} characters)`;
  return shown.replace(NOT_PLAIN_ALL, '\uFFFD');
}

const NOT_PLAIN_ALL = /[\p{Cs}\u0000]/gu;

/**
 * Most characters of an item's refusal: its `field` (a path of the client's own keys, each cut by
 * echo(), up to the nesting limit) and its `detail`. The store records them for a retry, so each is
 * bounded whatever the item held.
 */
export const MAX_REFUSAL_FIELD = 256;
export const MAX_REFUSAL_DETAIL = 1024;

/** Most names of a list an answer repeats (a token's assets, say); the rest are counted. */
export const MAX_LISTED = 8;

/**
 * A list of names as an answer repeats it: the first `most`, each cut by echo(), then how many more, so
 * that a token with a thousand assets does not make every refusal of it a thousand names long.
 */
export function nameList(names: readonly string[], most = MAX_LISTED): string {
  const shown = names.slice(0, most).map((name) => echo(name)).join(', ');
  return names.length <= most ? shown : `${shown} and ${names.length - most} more`;
}

/** A string schema that keeps the rule: checked by `isPlainText`, and documented by PLAIN_TEXT_PATTERN. */
export function plainText(schema: z.ZodString, pattern = PLAIN_TEXT_PATTERN): z.ZodString {
  return schema.refine(isPlainText, { error: PLAIN_TEXT_RULE }).meta({ pattern });
}

/**
 * Any text made to keep the rule and fit in `most` characters: cut there (never between the two halves
 * of a surrogate pair), with NUL and unpaired surrogates as U+FFFD. For text the producer takes from the
 * outside and must send whatever it holds, such as an error's message.
 */
export function toPlainText(text: string, most: number): string {
  let cut = text.length <= most ? text : text.slice(0, most);
  if (cut.length < text.length && /[\uD800-\uDBFF]$/.test(cut)) cut = cut.slice(0, -1);
  return cut.replace(NOT_PLAIN_ALL, '\uFFFD');
}
