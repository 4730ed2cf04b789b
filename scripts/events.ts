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
