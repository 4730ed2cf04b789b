import Database from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { PostgresDedupeStore } from '../../src/dedupe/postgres/store.js';
import type { TokenRequest } from '../../src/dedupe/tokens.js';
import { LINEAGE_KEPT } from '../../src/dedupe/ingest/lineage.js';
import { newKey } from '../support/http.js';
import { PG_URL, pgAvailable, pgSkipReason } from '../support/postgres.js';
import { allEvents, startServer, type Backend, type RunningServer } from '../support/server.js';

/**
 * Lineage across tenants: a cause must be earned (an event of an asset the publishing token consumes),
 * refusals name only what the caller sent and the cause it named, and what lineage stores and answers is
 * bounded per event, whatever the chain above it.
 */

const stream = (producer: string, runId = 'r1') => ({ producer, workflow: 'w', runId, task: null, attempt: 1 });
const event = (seq: number, asset: string, partitionKey: string, cause?: number) => ({
  seq,
  key: newKey(),
  kind: 'event',
  asset,
  partitionKey,
  ...(cause === undefined ? {} : { cause: { cursor: cause } }),
});

async function send(url: string, token: string | undefined, body: unknown) {
  const response = await fetch(`${url}/v1/emissions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, text, json: JSON.parse(text) };
}

const tokenFor = async (running: RunningServer, request: TokenRequest) => (await running.server.store.tokens.create(request)).token;
const cursorOf = async (running: RunningServer, admin: string, partitionKey: string) =>
  (await allEvents(running.url, {}, admin)).find((e) => e.partitionKey === partitionKey)!.cursor;

/** Bytes the store keeps of the lineage of the events of one producer: its digests and its cause. */
async function storedLineageBytes(running: RunningServer, backend: Backend, producer: string): Promise<{ events: number; bytes: number }> {
  if (backend === 'sqlite') {
    const db = new Database(running.dbPath, { readonly: true });
    try {
      const row = db.prepare('SELECT count(*) AS events, coalesce(sum(length(lineage)), 0) + coalesce(sum(length(caused_by)), 0) AS bytes FROM events WHERE producer = ?').get(producer) as {
        events: number;
        bytes: number;
      };
      return row;
    } finally {
      db.close();
    }
  }
  const schema = (running.server.store as PostgresDedupeStore).schema;
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT count(*)::int AS events, (coalesce(sum(length(lineage)), 0) + 36 * count(caused_by))::int AS bytes FROM "${schema}".events WHERE producer = $1`,
      [producer],
    );
    return rows[0];
  } finally {
    await client.end();
  }
}

const BACKENDS: Backend[] = ['sqlite', 'postgres'];

for (const backend of BACKENDS) {
  describe.skipIf(backend === 'postgres' && !pgAvailable)(`lineage across tenants: ${backend}${backend === 'postgres' ? pgSkipReason : ''}`, () => {
    it("refuses a cause naming another producer's event, without telling anything of it, and leaves the victim as it was", async () => {
      const running = await startServer({ backend, assets: ['B_asset', 'X'] });
      const admin = await tokenFor(running, { scope: 'admin' });
      const victim = await tokenFor(running, { scope: 'publish', producers: 'B' });
      const mallory = await tokenFor(running, { scope: 'publish', producers: 'A', assets: ['X'] });
      expect((await send(running.url, victim, { stream: stream('B'), items: [event(1, 'B_asset', 'secret-pk-4711')] })).status).toBe(200);
      const secret = await cursorOf(running, admin, 'secret-pk-4711');
      const before = await allEvents(running.url, {}, admin);
      const answer = await send(running.url, mallory, { stream: stream('A'), items: [event(1, 'X', 'x1', secret), event(2, 'X', 'x2', secret + 1000)] });
      expect(answer.status).toBe(200);
      // Mallory's token consumes nothing: a held cause and a missing one are refused alike.
      expect(answer.json.results.map((r: { status: string; code?: string }) => r.code ?? r.status)).toEqual(['forbidden', 'forbidden']);
      expect(answer.json.results[0].field).toBe('cause');
      for (const secretPart of ['B_asset', 'secret-pk-4711', before[0]!.eventId]) expect(answer.text).not.toContain(secretPart);
      // A token that consumes X, naming B's event: refused the same; naming a cursor that holds nothing: a root.
      const consumingX = await tokenFor(running, { scope: 'publish', producers: 'A2', assets: ['X'], consumes: ['X'] });
      const second = await send(running.url, consumingX, { stream: stream('A2'), items: [event(1, 'X', 'x1', secret), event(2, 'X', 'x2', secret + 1000)] });
      expect(second.json.results.map((r: { status: string; code?: string }) => r.code ?? r.status)).toEqual(['forbidden', 'accepted']);
      for (const secretPart of ['B_asset', 'secret-pk-4711', before[0]!.eventId]) expect(second.text).not.toContain(secretPart);
      // The refused items left no event; the cause that is not there made a root, with no lineage of B's.
      const after = await allEvents(running.url, {}, admin);
      expect(after.filter((e) => e.producer === 'B')).toEqual(before);
      expect(after.filter((e) => e.producer.startsWith('A')).map((e) => [e.partitionKey, e.causedBy, e.depth])).toEqual([['x2', null, 0]]);
    });

    it("cannot poison a consumer's lineage: only a token that consumes an asset names its events as causes", async () => {
      const running = await startServer({ backend, assets: ['X', 'Y'] });
      const admin = await tokenFor(running, { scope: 'admin' });
      // The consumer: reads X, emits Y in response; its publish token consumes X.
      const consumer = await tokenFor(running, { scope: 'publish', producers: 'summariser', assets: ['Y'], consumes: ['X'] });
      // Mallory publishes X too, and wants the consumer's responses refused for good.
      const mallory = await tokenFor(running, { scope: 'publish', producers: 'A', assets: ['X'] });
      const malloryConsumingX = await tokenFor(running, { scope: 'publish', producers: 'A2', assets: ['X'], consumes: ['X'] });
      expect((await send(running.url, mallory, { stream: stream('A'), items: [event(1, 'X', 'day-1')] })).status).toBe(200);
      const x1 = await cursorOf(running, admin, 'day-1');
      expect((await send(running.url, consumer, { stream: stream('summariser'), items: [event(1, 'Y', 'day-1', x1)] })).json.results[0].status).toBe('accepted');
      const yCursor = (await allEvents(running.url, { asset: 'Y' }, admin))[0]!.cursor;
      // An X event that claims to descend from the consumer's own Y: refused, whichever X token sends it.
      for (const [token, producer] of [[mallory, 'A'], [malloryConsumingX, 'A2']] as const) {
        const poison = await send(running.url, token, { stream: stream(producer, 'poison'), items: [event(1, 'X', 'day-2', yCursor)] });
        expect(poison.json.results[0]).toMatchObject({ status: 'rejected', code: 'forbidden', field: 'cause' });
      }
      // So the consumer's response to the next X event is accepted: nothing grafted onto its input.
      expect((await send(running.url, mallory, { stream: stream('A', 'r2'), items: [event(1, 'X', 'day-2')] })).status).toBe(200);
      const x2 = (await allEvents(running.url, { asset: 'X' }, admin)).find((e) => e.partitionKey === 'day-2')!.cursor;
      expect((await send(running.url, consumer, { stream: stream('summariser'), items: [event(2, 'Y', 'day-2', x2)] })).json.results[0].status).toBe('accepted');
      // A token that consumes nothing names no cause; one that consumes X names X's events only.
      const plain = await tokenFor(running, { scope: 'publish', producers: 'plain' });
      expect((await send(running.url, plain, { stream: stream('plain'), items: [event(1, 'Y', 'p', x1)] })).json.results[0].code).toBe('forbidden');
      // Alike for a cursor that holds no event: its answer tells nothing of which cursors hold events.
      const nothing = await send(running.url, plain, { stream: stream('plain'), items: [event(2, 'Y', 'p', x1 + 100_000)] });
      expect(nothing.json.results[0]).toMatchObject({ status: 'rejected', code: 'forbidden' });
      expect(nothing.json.results[0].detail).toBe((await send(running.url, plain, { stream: stream('plain'), items: [event(3, 'Y', 'q', x1)] })).json.results[0].detail.replace(String(x1), String(x1 + 100_000)));
    });

    it('answers a caused event sent again as it was stored, however its cause would be judged today', async () => {
      const running = await startServer({ backend, assets: ['X', 'Y'] });
      const admin = await tokenFor(running, { scope: 'admin' });
      const source = await tokenFor(running, { scope: 'publish', producers: 'A', assets: ['X'] });
      expect((await send(running.url, source, { stream: stream('A'), items: [event(1, 'X', 'day-1')] })).status).toBe(200);
      const x1 = await cursorOf(running, admin, 'day-1');
      const consumer = await tokenFor(running, { scope: 'publish', producers: 'summariser', assets: ['Y'], consumes: ['X'] });
      const response = event(1, 'Y', 'day-1', x1);
      const first = await send(running.url, consumer, { stream: stream('summariser'), items: [response] });
      expect(first.json.results[0].status).toBe('accepted');
      // The operator narrows the consumer's token; a retry of the run on a fresh machine sends the event again.
      const narrowed = await tokenFor(running, { scope: 'publish', producers: 'summariser', assets: ['Y'] });
      const again = await send(running.url, narrowed, { stream: { ...stream('summariser'), attempt: 2 }, items: [response] });
      expect(again.json.results[0]).toMatchObject({ status: 'duplicate', eventId: first.json.results[0].eventId });
      // A new event with that cause is judged, and refused.
      const fresh = await send(running.url, narrowed, { stream: { ...stream('summariser'), attempt: 2 }, items: [{ ...response, seq: 2, key: newKey(), partitionKey: 'day-1b' }] });
      expect(fresh.json.results[0]).toMatchObject({ status: 'rejected', code: 'forbidden' });
      expect((await allEvents(running.url, { asset: 'Y' }, admin)).map((e) => e.partitionKey)).toEqual(['day-1']);
    });

    it('bounds what lineage stores and answers per event, for long chains and allowed cycles alike', async () => {
      const running = await startServer({ backend, assets: ['daily_rollup', 'report'], lineage: { cycles: { daily_rollup: 400 } } });
      // A chain 60 deep on the allowed cycle: each event responds to the one before.
      let cause: number | undefined;
      for (let day = 1; day <= 60; day++) {
        const answer = await send(running.url, undefined, { stream: stream('rollup'), items: [event(day, 'daily_rollup', `d${day}`, cause)] });
        expect(answer.json.results[0]).toMatchObject({ status: 'accepted' });
        cause = (await allEvents(running.url, { asset: 'daily_rollup' })).at(-1)!.cursor;
      }
      // 400 events caused by the deepest one, in one request.
      const items = Array.from({ length: 400 }, (_, i) => event(i + 1, 'daily_rollup', `fan-${i}`, cause));
      const body = JSON.stringify({ stream: stream('fan'), items });
      const answer = await send(running.url, undefined, JSON.parse(body));
      expect(answer.json.results.every((r: { status: string }) => r.status === 'accepted')).toBe(true);
      const fan = await storedLineageBytes(running, backend, 'fan');
      expect(fan.events).toBe(400);
      // Each event keeps LINEAGE_KEPT digests of 8 characters and its cause's id: a constant per event.
      const perEvent = LINEAGE_KEPT * 11 + 2 + 36;
      expect(fan.bytes).toBeLessThanOrEqual(400 * perEvent);
      expect(fan.bytes / Buffer.byteLength(body)).toBeLessThan(5);
      // A batch refused as a feedback loop (report/r repeats itself) is answered in bounded bytes per item.
      const longKey = 'r'.repeat(500);
      expect((await send(running.url, undefined, { stream: stream('reporter'), items: [event(1, 'report', longKey)] })).json.results[0]).toMatchObject({ status: 'accepted' });
      const reportCursor = (await allEvents(running.url, { asset: 'report' }))[0]!.cursor;
      const loops = Array.from({ length: 400 }, (_, i) => event(i + 2, 'report', longKey, reportCursor));
      const refused = await send(running.url, undefined, { stream: stream('reporter'), items: loops });
      expect(refused.json.results.every((r: { code: string }) => r.code === 'feedback_loop')).toBe(true);
      expect(refused.text.length / 400).toBeLessThan(700);
    });
  });
}
