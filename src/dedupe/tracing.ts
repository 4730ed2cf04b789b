import type { IncomingHttpHeaders } from 'node:http';
import { endingSpan, linkTo, type OtelApi } from '../protocol/trace.js';
import type { ItemResult, StreamIdentity } from '../protocol/wire.js';
import type { CheckedItem, InvalidItem } from './item-check.js';

/**
 * Runs one batch's ingest inside a CONSUMER span after OpenTelemetry's messaging conventions: a child of
 * the relay's span (from the traceparent header), linked to the trace each emission was committed in.
 * Without OpenTelemetry it just runs.
 */
export async function tracedIngest(
  otel: OtelApi | undefined,
  headers: IncomingHttpHeaders,
  stream: StreamIdentity,
  items: readonly (CheckedItem | InvalidItem)[],
  ingest: () => Promise<ItemResult[]>,
): Promise<ItemResult[]> {
  if (!otel) return ingest();
  const parent = otel.propagation.extract(otel.context.active(), headers);
  const links = items.flatMap((item) => {
    const link = item.kind === 'event' && item.trace ? linkTo(otel, item.trace) : undefined;
    return link ? [link] : [];
  });
  const span = otel.trace.getTracer('oncebox').startSpan(
    `receive ${stream.producer}`,
    {
      kind: otel.SpanKind.CONSUMER,
      links,
      attributes: {
        'messaging.system': 'oncebox',
        'messaging.operation.type': 'receive',
        'messaging.operation.name': 'receive',
        'messaging.destination.name': stream.producer,
        'messaging.batch.message_count': items.length,
        'oncebox.run_id': stream.runId,
        'oncebox.attempt': stream.attempt,
      },
    },
    parent,
  );
  return endingSpan(otel, span, async () => {
    const results = await ingest();
    span.setAttribute('oncebox.accepted', results.filter((result) => result.status === 'accepted').length);
    return results;
  });
}
