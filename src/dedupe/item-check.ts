import { canonicalJson, NonJsonValue, payloadFingerprint } from '../protocol/canonical-json.js';
import { z } from 'zod';
import { CONSUMER_ASSETS_CHECKPOINT, CONSUMER_CURSOR_CHECKPOINT } from '../protocol/catalog.js';
import { assetNameSchema, describeFirstIssue, emissionPayloadSchema, type EmissionPayload } from '../protocol/emission.js';
import { RejectionCode } from '../protocol/errors.js';
import { Limits } from '../protocol/limits.js';
import { traceContextSchema, type TraceContext } from '../protocol/trace.js';
import { echo } from '../protocol/text.js';
import { checkpointItemFieldsSchema, eventCauseSchema, itemPositionSchema, type EventCause } from '../protocol/wire.js';
import { RESERVED_KEY_PATH } from './json-body.js';

/** An event item that is well formed: it may still be refused by the store (unknown asset, conflict, gap). */
export interface CheckedEvent {
  valid: true;
  kind: 'event';
  seq: number;
  key: string;
  payload: EmissionPayload;
  fingerprint: string;
  /** The trace context the producer committed it in: metadata, in neither key nor fingerprint. */
  trace?: TraceContext | undefined;
  /** The stored event this one responds to, by cursor: the server derives its lineage from it. */
  cause?: EventCause | undefined;
  /** Set when the producer says the key comes from this stream's run alone (the run-keys header). */
  keyOfRun?: true;
}

/** A checkpoint item that is well formed; `value` is canonical JSON text. */
export interface CheckedCheckpoint {
  valid: true;
  kind: 'checkpoint';
  seq: number;
  key: string;
  name: string;
  value: string;
  /** 0 for an update as first committed; higher for one the producer coalesced newer values into. */
  revision: number;
}

export type CheckedItem = CheckedEvent | CheckedCheckpoint;

/** An item refused on its own shape. With a readable seq it still takes its place in the stream. */
export type InvalidItem = {
  valid: false;
  /** Never set: an invalid item has no kind, so `item.kind === 'event'` alone tells an event. */
  kind?: undefined;
  field: string;
  detail: string;
  /** Why it is refused, when not for its shape (the code an invalid shape gets). */
  code?: RejectionCode;
  /** The asset and partition it named, when it was a well-formed event refused for another reason. */
  subject?: ItemSubject;
} & ({ seq: number; key: string } | { seq: null; key: null });

/** The asset and partition an item names, kept with a refusal of it for the catalog. */
export interface ItemSubject {
  asset: string;
  partitionKey: string | null;
}

/** What an item names, when it can be read: a well-formed event's asset and partition. */
export function subjectOf(item: CheckedItem | InvalidItem): ItemSubject | undefined {
  if (item.kind === 'event') return { asset: item.payload.asset, partitionKey: item.payload.partitionKey ?? null };
  return item.valid ? undefined : item.subject;
}

const payloadSchema = emissionPayloadSchema();
const PAYLOAD_FIELDS = ['seq', 'key', 'kind', 'asset', 'partitionKey', 'partitionDate', 'extra', 'trace', 'cause'];

/**
 * Checks one item of a batch without touching the store, so that the store's transaction holds the
 * write lock only for the writes. The payload rules are the producer's own (src/protocol/emission.ts).
 */
export function checkItem(raw: unknown, index: number): CheckedItem | InvalidItem {
  const where = `items[${index}]`;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return { valid: false, seq: null, key: null, field: where, detail: `${where}: must be an object` };
  }
  const reserved = (raw as { [RESERVED_KEY_PATH]?: string })[RESERVED_KEY_PATH];
  const { seq, key, kind, ...fields } = raw as Record<string, unknown>;
  const position = itemPositionSchema.safeParse({ seq, key });
  if (!position.success) {
    if (reserved !== undefined) return { valid: false, seq: null, key: null, field: reserved, detail: `${echo(reserved)}: is a reserved key; rename it` };
    const problem = describeFirstIssue(position.error, { input: { seq, key }, prefix: where });
    return { valid: false, seq: null, key: null, field: problem.field, detail: problem.message };
  }
  // A UUID's hex digits may come in either case; one spelling per key keeps the dedupe key exact.
  const placed = { seq: position.data.seq, key: position.data.key.toLowerCase() };
  const invalid = (field: string, detail: string): InvalidItem => ({ valid: false, ...placed, field, detail });
  // The producer refuses such a key at commit; the body parser put this item's place and the key's path here.
  if (reserved !== undefined) return invalid(reserved, `${echo(reserved)}: is a reserved key; rename it`);
  // Only an event carries a trace context; on a checkpoint item `trace` is an unknown field.
  if (kind === 'checkpoint') return checkCheckpoint(fields, where, placed, invalid);
  if (kind !== 'event') return invalid(`${where}.kind`, `${where}.kind: must be "event" or "checkpoint"`);
  const { trace, cause, ...payload } = fields;
  const parsed = payloadSchema.safeParse(payload);
  if (!parsed.success) {
    const problem = describeFirstIssue(parsed.error, { input: payload, prefix: where, knownKeys: PAYLOAD_FIELDS });
    return invalid(problem.field, problem.message);
  }
  const traced = trace === undefined ? undefined : traceContextSchema.safeParse(trace);
  if (traced && !traced.success) {
    const problem = describeFirstIssue(traced.error, { input: trace, prefix: `${where}.trace`, knownKeys: ['traceparent', 'tracestate'] });
    return invalid(problem.field, problem.message);
  }
  const caused = cause === undefined ? undefined : eventCauseSchema.safeParse(cause);
  if (caused && !caused.success) {
    const problem = describeFirstIssue(caused.error, { input: cause, prefix: `${where}.cause`, knownKeys: ['cursor'] });
    return invalid(problem.field, problem.message);
  }
  return {
    valid: true,
    kind: 'event',
    ...placed,
    payload: parsed.data,
    fingerprint: payloadFingerprint(parsed.data),
    ...(traced ? { trace: traced.data } : {}),
    ...(caused ? { cause: caused.data } : {}),
  };
}

function checkCheckpoint(
  payload: Record<string, unknown>,
  where: string,
  placed: { seq: number; key: string },
  invalid: (field: string, detail: string) => InvalidItem,
): CheckedCheckpoint | InvalidItem {
  const parsed = checkpointItemFieldsSchema.safeParse(payload);
  if (!parsed.success) {
    const problem = describeFirstIssue(parsed.error, { input: payload, prefix: where, knownKeys: ['seq', 'key', 'kind', 'name', 'value', 'revision'] });
    return invalid(problem.field, problem.message);
  }
  let value: string;
  try {
    value = canonicalJson(parsed.data.value, `${where}.value`);
  } catch (error) {
    if (!(error instanceof NonJsonValue)) throw error;
    return invalid(error.path, `${error.path}: ${error.problem}`);
  }
  if (Buffer.byteLength(value) > Limits.maxExtraBytes) {
    return invalid(`${where}.value`, `${where}.value: must be at most ${Limits.maxExtraBytes} bytes as JSON; keep checkpoints small`);
  }
  // A group's cursor is counted from by the catalog: a cursor, or nothing of it is stored.
  if (parsed.data.name === CONSUMER_CURSOR_CHECKPOINT && !isCursor(parsed.data.value)) {
    return invalid(`${where}.value`, `${where}.value: a consumer group's ${CONSUMER_CURSOR_CHECKPOINT} is the cursor of the last event it consumed, a whole number of 0 or more`);
  }
  if (parsed.data.name === CONSUMER_ASSETS_CHECKPOINT) {
    const assets = groupAssetsSchema.safeParse(parsed.data.value);
    if (!assets.success) return invalid(`${where}.value`, `${where}.value: a consumer group's ${CONSUMER_ASSETS_CHECKPOINT} is its list of asset names, at most ${Limits.maxGroupAssets} of them`);
    // Kept as its distinct names in order: the catalog counts the group's lag once per asset.
    value = canonicalJson([...new Set(assets.data)].sort());
  }
  return { valid: true, kind: 'checkpoint', ...placed, name: parsed.data.name, value, revision: parsed.data.revision ?? 0 };
}

const isCursor = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

/** A consumer group's asset list: names, at most the most a group may count (duplicates are not counted twice). */
const groupAssetsSchema = z.array(assetNameSchema).refine((names) => new Set(names).size <= Limits.maxGroupAssets);

/**
 * An event the request's token may not publish (its asset is not in the token's list) is refused on its
 * own, as `forbidden`, like an event of an unknown asset: the other items of the batch go on.
 */
export function refuseOutOfScope(item: CheckedItem | InvalidItem, mayPublishTo: (asset: string) => boolean, allowed: string): CheckedItem | InvalidItem {
  if (item.kind !== 'event' || mayPublishTo(item.payload.asset)) return item;
  const asset = item.payload.asset;
  return {
    valid: false,
    seq: item.seq,
    key: item.key,
    field: 'asset',
    code: RejectionCode.Forbidden,
    subject: subjectOf(item)!,
    // The cause alone: what fixes it (a wider token, or the name corrected) is the remedy table's (rejection-fixes.ts).
    detail: `asset: this token may not publish to "${echo(asset)}" (it may publish to ${allowed})`,
  };
}
