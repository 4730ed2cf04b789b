import { describe, expect, it } from 'vitest';
import { startFaultProxy } from '../support/fault-proxy.js';
import { testOutbox } from '../support/outbox.js';
import { startServer } from '../support/server.js';

const fastRetry = { retryMinDelayMs: 5, retryMaxDelayMs: 20 };

describe('network faults between relay and server', () => {
  it('a lost acknowledgement: the retry gets the same receipt and the server holds one event', async () => {
    const server = await startServer();
    const proxy = await startFaultProxy(server.url);
    const box = await testOutbox({ server: proxy.url, ...fastRetry });
    // After the open, whose one request asks whether the server takes the token: the emission's is next.
    const before = proxy.stats.forwarded;
    proxy.plan('drop-response');
    const receipt = await box.asset('batch_ready').emit({ partitionKey: 'batch-41' });
    const events = await server.events();
    expect(events).toHaveLength(1);
    expect(receipt).toEqual({ eventId: events[0]!.eventId, timestamp: events[0]!.timestamp, duplicate: true });
    expect(proxy.stats.forwarded - before).toBe(2);
  });

  it.each(['drop-request', 'drop-response', 'duplicate', 'delay', 'fail-503'] as const)(
    'with %s faults on most requests, delivers every emission once, in order',
    async (fault) => {
      const server = await startServer();
      const proxy = await startFaultProxy(server.url);
      proxy.plan(...Array.from({ length: 30 }, (_, i) => (i % 3 === 2 ? 'forward' : fault)));
      const box = await testOutbox({ server: proxy.url, batchMaxRows: 4, ...fastRetry });
      const ready = box.asset('batch_ready');
      const emissions = [];
      for (let batch = 1; batch <= 40; batch++) {
        emissions.push(box.commit((tx) => tx.emit(ready, { partitionKey: `batch-${batch}` })));
      }
      await Promise.all(emissions.map((emission) => emission.receipt()));
      const events = await server.events();
      expect(events.map((event) => event.partitionKey)).toEqual(emissions.map((_, i) => `batch-${i + 1}`));
      expect(proxy.stats.requests).toBeGreaterThanOrEqual(10);
    },
  );
});
