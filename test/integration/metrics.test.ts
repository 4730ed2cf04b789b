import { join } from 'node:path';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { openOutbox, type OutboxLogger } from '../../src/outbox/index.js';
import { item, newKey, STREAM } from '../support/http.js';
import { RUN } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet: OutboxLogger = { info: () => undefined, warn: () => undefined, error: () => undefined };

/**
 * Prometheus text exposition format 0.0.4, line by line: comments are HELP or TYPE, every sample is
 * `name{label="value",…} number` (NaN in any case, as Prometheus reads it: prom-client writes `Nan`
 * for an event-loop lag not measured yet). Returns the samples by their name and labels as written.
 */
function parsePrometheus(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      expect(line).toMatch(/^# (HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*|TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped))$/);
      continue;
    }
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})?) (-?[0-9.e+-]+|[Nn][Aa][Nn]|[+-]?Inf)$/.exec(line);
    expect(match, `not a Prometheus sample: ${line}`).not.toBeNull();
    samples.set(match![1]!, Number(match![2]));
  }
  return samples;
}

describe('Prometheus metrics', () => {
  it('the server serves /metrics to a token that may read them, and its counters move with the traffic', async () => {
    const running = await startServer({ token: 'the-admin-token' });
    const scraper = (await running.server.store.tokens.create({ scope: 'read', reads: ['metrics'] })).token;
    const reader = (await running.server.store.tokens.create({ scope: 'read' })).token;
    const scrape = async () => {
      const response = await fetch(`${running.url}/metrics`, { headers: { authorization: `Bearer ${scraper}` } });
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      return parsePrometheus(await response.text());
    };
    expect((await fetch(`${running.url}/metrics`)).status).toBe(401);
    expect((await fetch(`${running.url}/metrics`, { headers: { authorization: `Bearer ${reader}` } })).status).toBe(403);

    const before = await scrape();
    const accepted = 'oncebox_ingest_items_total{result="accepted",code=""}';
    const unknownAsset = 'oncebox_ingest_items_total{result="rejected",code="unknown_asset"}';
    const posted = 'oncebox_http_requests_total{method="POST",route="/v1/emissions",status="200"}';
    const body = { stream: STREAM, items: [item(1, newKey()), item(2, newKey()), item(3, newKey(), { asset: 'not_registered' })] };
    const answer = await fetch(`${running.url}/v1/emissions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer the-admin-token' },
      body: JSON.stringify(body),
    });
    expect(answer.status).toBe(200);
    const after = await scrape();
    expect((after.get(accepted) ?? 0) - (before.get(accepted) ?? 0)).toBe(2);
    expect((after.get(unknownAsset) ?? 0) - (before.get(unknownAsset) ?? 0)).toBe(1);
    expect((after.get(posted) ?? 0) - (before.get(posted) ?? 0)).toBe(1);
    expect(after.get('oncebox_ingest_duration_seconds_count')).toBe((before.get('oncebox_ingest_duration_seconds_count') ?? 0) + 1);
    expect(after.get('oncebox_http_requests_total{method="GET",route="/metrics",status="403"}')).toBe(1);
    expect([...after.keys()].some((name) => name.startsWith('process_cpu_user_seconds_total'))).toBe(true);

    expect(after.get('oncebox_events_stored')).toBe(2);
    expect(after.get('oncebox_dedupe_records')).toBe(2);

    await running.server.compact();
    expect((await scrape()).get('oncebox_compactions_total')).toBe(1);

    expect(after.get('oncebox_event_readers_waiting')).toBe(0);
    const waiting = fetch(`${running.url}/v1/events?after=${2 ** 40}&wait=10`, { headers: { authorization: `Bearer ${reader}` } });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect((await scrape()).get('oncebox_event_readers_waiting')).toBe(1);
    await running.close();
    expect((await waiting).status).toBe(200);
  });

  it('the producer publishes pending, dead, delivered and delivery latency in a registry of its own', async () => {
    const { url } = await startServer();
    const registry = new Registry();
    const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'orders', run: RUN, server: url, metrics: registry, logger: quiet });
    box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'b1' }));
    box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'b2' }));
    box.commit((tx) => tx.emit(box.asset('not_registered'), { partitionKey: 'b3' }));
    const down = await openOutbox({ path: join(tempDir(), 'down.db'), producer: 'offline', run: RUN, server: 'http://127.0.0.1:9', metrics: registry, logger: quiet });
    down.commit((tx) => tx.emit(down.asset('batch_ready'), { partitionKey: 'b1' }));
    await box.relay!.drain(10_000);

    const samples = parsePrometheus(await registry.metrics());
    expect(samples.get('oncebox_outbox_delivered_total{producer="orders"}')).toBe(2);
    expect(samples.get('oncebox_outbox_dead_total{producer="orders",code="unknown_asset"}')).toBe(1);
    expect(samples.get('oncebox_outbox_dead{producer="orders"}')).toBe(1);
    expect(samples.get('oncebox_outbox_pending{producer="orders"}')).toBe(0);
    expect(samples.get('oncebox_outbox_pending{producer="offline"}')).toBe(1);
    expect(samples.get('oncebox_outbox_delivery_latency_seconds_count{producer="orders"}')).toBe(2);

    await box.close();
    await down.close({ timeoutMs: 0 });
    // A closed outbox is no longer read.
    expect(parsePrometheus(await registry.metrics()).get('oncebox_outbox_pending{producer="offline"}')).toBeUndefined();
  });
});
