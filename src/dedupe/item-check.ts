import { describeFirstIssue, emissionPayloadSchema, type EmissionPayload } from '../protocol/emission.js';
import { payloadFingerprint } from '../protocol/canonical-json.js';
import { itemPositionSchema } from '../protocol/wire.js';

/** An item that is well formed: it may still be refused by the store (unknown asset, conflict, gap). */
export interface CheckedItem {
  valid: true;
  seq: number;
  key: string;
  payload: EmissionPayload;
  fingerprint: string;
}

/** An item refused on its own shape. With a readable seq it still takes its place in the stream. */
export interface InvalidItem {
  valid: false;
  seq: number | null;
  key: string | null;
  field: string;
  detail: string;
}

const payloadSchema = emissionPayloadSchema();
const PAYLOAD_FIELDS = ['seq', 'key', 'kind', 'asset', 'partitionKey', 'partitionDate', 'extra'];

/**
 * Checks one item of a batch without touching the store, so that the store's transaction holds the
 * write lock only for the writes. The payload rules are the producer's own (src/protocol/emission.ts).
 */
export function checkItem(raw: unknown, index: number): CheckedItem | InvalidItem {
  const where = `items[${index}]`;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return { valid: false, seq: null, key: null, field: where, detail: `${where}: must be an object` };
  }
  const { seq, key, kind, ...payload } = raw as Record<string, unknown>;
  const position = itemPositionSchema.safeParse({ seq, key });
  if (!position.success) {
    const problem = describeFirstIssue(position.error, { input: { seq, key }, prefix: where });
    return { valid: false, seq: null, key: null, field: problem.field, detail: problem.message };
  }
  const placed = { seq: position.data.seq, key: position.data.key };
  if (kind !== 'event') {
    return { valid: false, ...placed, field: `${where}.kind`, detail: `${where}.kind: must be "event"` };
  }
  const parsed = payloadSchema.safeParse(payload);
  if (!parsed.success) {
    const problem = describeFirstIssue(parsed.error, { input: payload, prefix: where, knownKeys: PAYLOAD_FIELDS });
    return { valid: false, ...placed, field: problem.field, detail: problem.message };
  }
  return { valid: true, ...placed, payload: parsed.data, fingerprint: payloadFingerprint(parsed.data) };
}

