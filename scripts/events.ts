import type { Page, Rejection } from '../src/protocol/catalog.js';
import type { EventPage, StoredEvent } from '../src/protocol/wire.js';

/**
 * Every stored event (of one asset, after a cursor), paging by cursor the way a reader would: for the
 * tests, the demos and the benchmarks, which read a server back without a consumer.
 */
export async function allEvents(url: string, query: { asset?: string; after?: number } = {}, token?: string): Promise<StoredEvent[]> {
  const events: StoredEvent[] = [];
  let after = query.after ?? 0;
  for (;;) {
    const params = new URLSearchParams({ after: String(after), limit: '1000', ...(query.asset ? { asset: query.asset } : {}) });
    const response = await fetch(`${url}/v1/events?${params}`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
    if (!response.ok) throw new Error(`GET /v1/events answered ${response.status}: ${await response.text()}`);
    const page = (await response.json()) as EventPage;
    events.push(...page.events);
    if (page.events.length === 0) return events;
    after = page.next;
  }
}

/**
 * Every refusal the server recorded (`GET /v1/catalog/rejections`, page after page): what a relay parked
 * dead. A zombie's items are fenced, not refused, so they are not among them.
 */
export async function allRejections(url: string, token?: string): Promise<Rejection[]> {
  const rejections: Rejection[] = [];
  let after: string | null = null;
  do {
    const params = new URLSearchParams({ limit: '500', ...(after === null ? {} : { after }) });
    const response = await fetch(`${url}/v1/catalog/rejections?${params}`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
    if (!response.ok) throw new Error(`GET /v1/catalog/rejections answered ${response.status}: ${await response.text()}`);
    const page = (await response.json()) as Page<Rejection>;
    rejections.push(...page.items);
    after = page.next;
  } while (after !== null);
  return rejections;
}
