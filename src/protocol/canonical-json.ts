import { hash } from 'node:crypto';
import { Limits } from './limits.js';
import { echo, isPlainText, PLAIN_TEXT_RULE } from './text.js';

/** Where a value stops being plain JSON, and why. */
export class NonJsonValue extends Error {
  constructor(
    readonly path: string,
    readonly problem: string,
  ) {
    super(`${path} ${problem}`);
  }
}

/**
 * JSON with object keys sorted and no whitespace, so that two payloads that mean the same thing have
 * the same bytes whatever order their keys were written in. One walk both writes the text and checks
 * that the value is plain JSON, throwing NonJsonValue at the first part that is not: NaN, a Date, a
 * class instance, a function, undefined, nesting deeper than `maxDepth`, a `__proto__` key (which the
 * server's JSON parser refuses outright as prototype poisoning), or a string or key that breaks the
 * plain-text rule (src/protocol/text.ts).
 */
export function canonicalJson(value: unknown, path = '', maxDepth: number = Limits.maxExtraDepth): string {
  return write(value, path, 0, maxDepth);
}

function write(value: unknown, path: string, depth: number, maxDepth: number): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
      if (!isPlainText(value)) throw new NonJsonValue(path, PLAIN_TEXT_RULE);
      return JSON.stringify(value);
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      if (Number.isFinite(value)) return JSON.stringify(value);
      throw new NonJsonValue(path, `is ${value}, which JSON cannot hold; use null or a string`);
    case 'undefined':
      throw new NonJsonValue(path, 'is undefined, which JSON cannot hold; leave the field out or use null');
    case 'object':
      break;
    default:
      throw new NonJsonValue(path, `is a ${typeof value}, which JSON cannot hold; leave it out or convert it to a string`);
  }
  if (depth >= maxDepth) throw new NonJsonValue(path, `nests deeper than ${maxDepth} levels; flatten it`);
  if (Array.isArray(value)) {
    let text = '[';
    for (let i = 0; i < value.length; i++) text += (i ? ',' : '') + write(value[i], `${path}[${i}]`, depth + 1, maxDepth);
    return `${text}]`;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    const name = (value as object).constructor?.name ?? 'object';
    throw new NonJsonValue(path, `is a ${name}, not a plain object; convert it (a Date to an ISO string, say)`);
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  let text = '{';
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    if (key === '__proto__') throw new NonJsonValue(`${path}.__proto__`, 'is a reserved key; rename it');
    if (!isPlainText(key)) throw new NonJsonValue(`${path}.${JSON.stringify(echo(key))}`, `key ${PLAIN_TEXT_RULE}`);
    text += `${i ? ',' : ''}${JSON.stringify(key)}:${write(record[key], `${path}.${echo(key)}`, depth + 1, maxDepth)}`;
  }
  return `${text}}`;
}

/** What makes two emissions with one idempotency key "the same": everything the downstream sees. */
export interface FingerprintedPayload {
  asset: string;
  partitionKey?: string | null | undefined;
  partitionDate?: string | null | undefined;
  /** `extra` as canonical JSON text (see canonicalJson). */
  extra?: string | null | undefined;
}

/**
 * The payload fingerprint both sides compare to tell a retry (same key, same fingerprint) from a
 * conflict (same key, different fingerprint): a SHA-256 of the canonical JSON of
 * [asset, partitionKey, partitionDate, extra]. Provenance (attempt, task) is left out on purpose: a
 * retry by attempt 2 of what attempt 1 sent is the same emission.
 */
export function payloadFingerprint(payload: FingerprintedPayload): string {
  const head = JSON.stringify([payload.asset, payload.partitionKey ?? null, payload.partitionDate ?? null]);
  return hash('sha256', `${head.slice(0, -1)},${payload.extra ?? 'null'}]`, 'base64url');
}
