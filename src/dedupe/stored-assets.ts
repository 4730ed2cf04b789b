import type { ItemResult } from '../protocol/wire.js';
import type { CheckedItem, InvalidItem } from './item-check.js';

/** The assets a request stored new events of: the readers to wake. Results come in the items' order. */
export function storedAssets(items: readonly (CheckedItem | InvalidItem)[], results: readonly ItemResult[]): Set<string> {
  const assets = new Set<string>();
  results.forEach((result, index) => {
    const item = items[index];
    if (result.status === 'accepted' && item?.kind === 'event') assets.add(item.payload.asset);
  });
  return assets;
}

/** PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; beyond this, every reader is woken instead. */
const MAX_PAYLOAD = 7000;

/** The NOTIFY payload that names the assets a commit stored events of; empty means "every asset". */
export function notifyPayload(assets: readonly string[]): string {
  const payload = JSON.stringify([...new Set(assets)]);
  return Buffer.byteLength(payload) < MAX_PAYLOAD ? payload : '';
}

/** The assets a NOTIFY payload names; undefined (wake every reader) for an empty or foreign one. */
export function notifiedAssets(payload: string | undefined): string[] | undefined {
  if (!payload) return undefined;
  try {
    const parsed: unknown = JSON.parse(payload);
    return Array.isArray(parsed) && parsed.every((asset) => typeof asset === 'string') ? parsed : undefined;
  } catch {
    return undefined;
  }
}
