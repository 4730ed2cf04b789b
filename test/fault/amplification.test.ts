import { describe, expect, it } from 'vitest';
import { item, newKey, post, STREAM } from '../support/http.js';
import { startServer } from '../support/server.js';

/** Requests that cost the server far more than they cost the client, and the bounds that stop them. */
describe('amplification', () => {
  it('keeps a page of large events within maxPageBytes, and pages on from where it stopped', async () => {
    const { url } = await startServer({ maxPageBytes: 200_000 });
    const big = 'x'.repeat(60_000);
    for (let request = 0; request < 3; request++) {
      const items = Array.from({ length: 10 }, (_, i) => item(request * 10 + i + 1, newKey(), { extra: { big } }));
      expect((await post(`${url}/v1/emissions`, JSON.stringify({ stream: STREAM, items }))).status).toBe(200);
    }
    const first = await fetch(`${url}/v1/events?limit=1000`);
    const text = await first.text();
    expect(text.length).toBeLessThanOrEqual(200_000 + 1000);
    const page = JSON.parse(text) as { events: { seq: number }[]; next: number };
    expect(page.events.map((event) => event.seq)).toEqual([1, 2, 3]);
    const seqs: number[] = [];
    for (let after = 0; ; ) {
      const next = (await (await fetch(`${url}/v1/events?limit=1000&after=${after}`)).json()) as { events: { seq: number }[]; next: number };
      if (next.events.length === 0) break;
      seqs.push(...next.events.map((event) => event.seq));
      after = next.next;
    }
    expect(seqs).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
  });

  it('sends one event even when it alone is larger than a page', async () => {
    const { url } = await startServer({ maxPageBytes: 1024 });
    await post(`${url}/v1/emissions`, JSON.stringify({ stream: STREAM, items: [item(1, newKey(), { extra: { big: 'y'.repeat(5000) } })] }));
    const page = (await (await fetch(`${url}/v1/events`)).json()) as { events: unknown[] };
    expect(page.events).toHaveLength(1);
  });

  it('refuses a body nested deeper than 64 levels before parsing it', async () => {
    const { url } = await startServer();
    const depth = 3_000_000;
    const answer = await post(`${url}/v1/emissions`, `{"stream":${JSON.stringify(STREAM)},"items":${'['.repeat(depth)}${']'.repeat(depth)}}`);
    expect({ status: answer.status, code: answer.json.code, detail: answer.json.detail }).toEqual({
      status: 400,
      code: 'malformed_json',
      detail: 'the body nests deeper than 64 levels; flatten it',
    });
    // Brackets inside strings are not nesting.
    const quoted = await post(`${url}/v1/emissions`, JSON.stringify({ stream: STREAM, items: [item(1, newKey(), { extra: { text: '['.repeat(500) } })] }));
    expect(quoted.json.results[0].status).toBe('accepted');
  });

  it('echoes no more than 64 characters of a field name, and suggests no spelling for a long one', async () => {
    const { url } = await startServer();
    const longName = 'k'.repeat(7 * 1024 * 1024);
    const answer = await post(`${url}/v1/emissions`, `{"stream":${JSON.stringify(STREAM)},"items":[],"${longName}":1}`);
    expect(answer.status).toBe(400);
    expect(answer.text.length).toBeLessThan(2000);
    expect(answer.json.detail).toBe(`${'k'.repeat(64)}… (${longName.length} characters): unknown field; known fields are stream, items`);
    const items = Array.from({ length: 1000 }, (_, i) => ({ ...item(i + 1, newKey()), [`${'m'.repeat(5000)}${i}`]: 1 }));
    const many = await post(`${url}/v1/emissions`, JSON.stringify({ stream: STREAM, items }));
    expect(many.status).toBe(200);
    expect(many.json.results[0].detail).toBe(
      `items[0].${'m'.repeat(64)}… (5001 characters): unknown field; known fields are seq, key, kind, asset, partitionKey, partitionDate, extra, trace, cause`,
    );
  });

  it('refuses a body in a charset other than UTF-8', async () => {
    const { url } = await startServer();
    const body = JSON.stringify({ stream: STREAM, items: [item(1, newKey())] });
    for (const charset of ['utf-16', 'UTF-16LE', 'latin1', '"iso-8859-1"']) {
      const answer = await post(`${url}/v1/emissions`, body, { 'content-type': `application/json; charset=${charset}` });
      expect({ charset, status: answer.status, code: answer.json.code }).toEqual({ charset, status: 415, code: 'unsupported_media_type' });
    }
    for (const charset of ['utf-8', 'UTF-8', 'utf8']) {
      const answer = await post(`${url}/v1/emissions`, body, { 'content-type': `application/json; charset=${charset}` });
      expect(answer.status).toBe(200);
    }
  });
});
