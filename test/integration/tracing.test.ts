import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openOutbox, type OutboxLogger } from '../../src/outbox/index.js';
import { item, newKey, STREAM } from '../support/http.js';
import { RUN } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet: OutboxLogger = { info: () => undefined, warn: () => undefined, error: () => undefined };
const exporter = new InMemorySpanExporter();
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  // What an application's OpenTelemetry setup does: a tracer provider, a context manager, W3C headers.
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  context.setGlobalContextManager(contextManager.enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});

afterAll(() => {
  trace.disable();
  context.disable();
  propagation.disable();
});

describe('OpenTelemetry', () => {
  it('carries the trace an emission was committed in from the producer, through the server, to readers, with spans on the way', async () => {
    const running = await startServer();
    const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'orders', run: RUN, server: running.url, logger: quiet });
    const job = trace.getTracer('the-job').startSpan('ingest batch 41');
    const jobContext = job.spanContext();
    const emission = context.with(trace.setSpan(context.active(), job), () =>
      box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-41' })),
    );
    // Outside any span: no trace context to carry.
    const untraced = box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-42' }));
    job.end();
    await emission.receipt();
    await untraced.receipt();
    await box.close();

    // The reader gets the producer's trace context with the event.
    const events = (await running.server.store.listEvents({ after: 0, limit: 10 })).events;
    expect(events.map((event) => [event.partitionKey, event.trace?.traceparent.split('-')[1] ?? null])).toEqual([
      ['batch-41', jobContext.traceId],
      ['batch-42', null],
    ]);
    expect(events[0]!.trace!.traceparent).toBe(`00-${jobContext.traceId}-${jobContext.spanId}-01`);

    // The relay's span links to the job's span; the server's span is its child.
    const spans = exporter.getFinishedSpans();
    const send = spans.find((span) => span.name === 'send orders')!;
    const receive = spans.find((span) => span.name === 'receive orders')!;
    expect(send.kind).toBe(SpanKind.PRODUCER);
    expect(send.attributes).toMatchObject({ 'messaging.system': 'oncebox', 'messaging.operation.type': 'send', 'messaging.destination.name': 'orders' });
    expect(send.links.map((link) => link.context.spanId)).toContain(jobContext.spanId);
    expect(receive.kind).toBe(SpanKind.CONSUMER);
    expect(receive.spanContext().traceId).toBe(send.spanContext().traceId);
    expect(receive.parentSpanContext?.spanId).toBe(send.spanContext().spanId);
    expect(receive.links.map((link) => link.context.traceId)).toContain(jobContext.traceId);
  });

  it('keeps the trace a held emission was committed in until its release', async () => {
    const running = await startServer();
    const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'orders', run: RUN, server: running.url, logger: quiet });
    const job = trace.getTracer('the-job').startSpan('last batch');
    context.with(trace.setSpan(context.active(), job), () => box.commit((tx) => tx.emit(box.asset('run_done'), { partitionKey: 'held', on: 'success' })));
    box.commit((tx) => tx.emit(box.asset('run_done'), { partitionKey: 'held-untraced', on: 'success' }));
    job.end();
    box.complete();
    await box.close();
    const events = (await running.server.store.listEvents({ after: 0, limit: 10 })).events.filter((event) => event.asset === 'run_done');
    expect(events.map((event) => [event.partitionKey, event.trace?.traceparent ?? null])).toEqual([
      ['held', `00-${job.spanContext().traceId}-${job.spanContext().spanId}-01`],
      ['held-untraced', null],
    ]);
  });

  it('refuses a malformed trace context item by item, and a retry in another trace keeps the first one', async () => {
    const { url, server } = await startServer();
    const first = { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` };
    const key = newKey();
    const post = (items: unknown[]) =>
      fetch(`${url}/v1/emissions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ stream: STREAM, items }) }).then(
        (response) => response.json() as Promise<{ results: { status: string; field?: string; detail?: string }[] }>,
      );
    const answer = await post([item(1, key, { trace: first }), item(2, newKey(), { trace: { traceparent: 'not-a-trace' } })]);
    expect(answer.results.map((result) => result.status)).toEqual(['accepted', 'rejected']);
    expect(answer.results[1]).toMatchObject({ field: 'items[1].trace.traceparent', detail: expect.stringContaining('must be a W3C traceparent') });
    const retry = await post([item(1, key, { trace: { traceparent: `00-${'c'.repeat(32)}-${'d'.repeat(16)}-01` } })]);
    expect(retry.results[0]!.status).toBe('duplicate');
    expect((await server.store.listEvents({ after: 0, limit: 10 })).events.map((event) => event.trace)).toEqual([first]);
  });
});
