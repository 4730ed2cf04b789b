import { parse as parseUuid, v5 as uuidv5 } from 'uuid';

/**
 * The namespace of every oncebox key. Fixed forever: changing it would give every re-run new keys, and
 * the server would take a re-run's emissions for new events.
 */
export const ONCEBOX_KEY_NAMESPACE = '6f3b2a8e-4c1d-5e9f-8a7b-0c2d4e6f8a1b';
/** Parsed once: the key is derived for every emission of every commit. */
const NAMESPACE_BYTES = parseUuid(ONCEBOX_KEY_NAMESPACE);

/**
 * @internal The UUIDv5 of a list of strings, numbers and nulls, named by its JSON text. A flat list of
 * primitives has one JSON form, so JSON.stringify is canonical here. The producer derives its keys with
 * it, and the server the keys it checks (a lifecycle event's).
 */
export function uuidOf(parts: readonly (string | number | null)[]): string {
  return uuidv5(Buffer.from(JSON.stringify(parts)), NAMESPACE_BYTES);
}
