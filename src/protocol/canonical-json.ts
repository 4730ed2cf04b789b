import { createHash } from 'node:crypto';

/**
 * JSON with object keys sorted and no whitespace, so that two payloads that mean the same thing have
 * the same bytes whatever order their keys were written in. Keys are read with Object.keys and written
 * as strings, so an own `__proto__` key (as JSON.parse makes it) is kept as data, never as a prototype.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    const text = JSON.stringify(value);
    if (text === undefined) throw new TypeError(`canonicalJson: ${typeof value} is not a JSON value`);
    return text;
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const record = value as Record<string, unknown>;
  const parts = Object.keys(record)
    .sort()
    .map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`);
  return `{${parts.join(',')}}`;
}

/** What makes two emissions with one idempotency key "the same": everything the downstream sees. */
export interface FingerprintedPayload {
  asset: string;
  partitionKey?: string | null | undefined;
  partitionDate?: string | null | undefined;
  extra?: unknown;
}

/**
 * The payload fingerprint both sides compare to tell a retry (same key, same fingerprint) from a
 * conflict (same key, different fingerprint). Provenance (attempt, task) is left out on purpose: a
 * retry by attempt 2 of what attempt 1 sent is the same emission.
 */
export function payloadFingerprint(payload: FingerprintedPayload): string {
  const canonical = canonicalJson([
    payload.asset,
    payload.partitionKey ?? null,
    payload.partitionDate ?? null,
    payload.extra ?? null,
  ]);
  return createHash('sha256').update(canonical).digest('base64url');
}
