import type { EventPage } from '../protocol/wire.js';
import type { DedupeStore, EventQuery } from './store.js';

/**
 * How often a waiting reader looks again without a wake: only a missed wake (a PostgreSQL listener that
 * lost its connection) makes it matter.
 */
const LOOK_AGAIN_MS = 5000;

/** Rows read from the store at a time while a page is filled. */
const CHUNK = 100;

/**
 * A page of events of at most `maxBytes` of JSON (but never empty while events remain): it stops early,
 * and `next` says where to go on. Read from the store a chunk at a time, so that a page of large events
 * costs the server at most one chunk beyond what it sends.
 * @internal
 */
export async function boundedPage(store: DedupeStore, query: EventQuery, maxBytes: number): Promise<EventPage> {
  const events: EventPage['events'] = [];
  let bytes = 0;
  let after = query.after;
  while (events.length < query.limit) {
    const wanted = Math.min(CHUNK, query.limit - events.length);
    const chunk = await store.listEvents({ ...query, after, limit: wanted });
    for (const event of chunk.events) {
      const size = JSON.stringify(event).length + 1;
      if (events.length > 0 && bytes + size > maxBytes) return { events, next: events.at(-1)!.cursor };
      events.push(event);
      bytes += size;
    }
    if (chunk.events.length < wanted) break;
    after = chunk.next;
  }
  return { events, next: events.at(-1)?.cursor ?? query.after };
}

/**
 * `boundedPage`, waiting up to `waitMs` for an event when there is none yet (long-poll): it answers as
 * soon as the store says events of its asset were stored and the page holds one, when the time is up,
 * when the reader goes away (`gone`), or when the server closes. Readers woken together that ask for
 * the same page share one read of the store.
 * @internal
 */
export async function waitedPage(store: DedupeStore, query: EventQuery, maxBytes: number, waitMs: number, gone: AbortSignal): Promise<EventPage> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const page = await sharedPage(store, query, maxBytes);
    const remaining = deadline - Date.now();
    if (page.events.length > 0 || remaining <= 0 || gone.aborted || store.stored.isClosed) return page;
    await store.stored.wait(Math.min(remaining, LOOK_AGAIN_MS), gone, query.asset ?? query.assets);
    // A reader that left is not read for again: at shutdown its handler may still be running after the
    // server's connections are closed, when the store is closing under it.
    if (gone.aborted) return page;
  }
}

/** The reads in flight, per store and page asked for: the readers a wake sends back at once share them. */
const inFlight = new WeakMap<DedupeStore, Map<string, Promise<EventPage>>>();

function sharedPage(store: DedupeStore, query: EventQuery, maxBytes: number): Promise<EventPage> {
  let reads = inFlight.get(store);
  if (reads === undefined) inFlight.set(store, (reads = new Map()));
  const key = JSON.stringify([store.stored.generation, query.asset ?? null, query.assets ?? null, query.after, query.limit, maxBytes]);
  const running = reads.get(key);
  if (running !== undefined) return running;
  const read = boundedPage(store, query, maxBytes).finally(() => reads.delete(key));
  reads.set(key, read);
  return read;
}
