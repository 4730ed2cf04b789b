import { endingSpan, linkTo, type OtelApi, type TraceContext } from '../../protocol/trace.js';
import type { ItemResult, StreamIdentity } from '../../protocol/wire.js';
import type { OutboxRow } from '../file/schema.js';

/**
 * Sends one batch (`send` with the headers to pass on) inside a PRODUCER span after OpenTelemetry's
 * messaging conventions: linked to each emission's own trace, and passed on to the server in the
 * traceparent header so that its span is this one's child.
 * @internal
 */
export function sendInSpan(
  otel: OtelApi,
  stream: StreamIdentity,
  batch: readonly OutboxRow[],
  send: (headers: Record<string, string>) => Promise<ItemResult[]>,
): Promise<ItemResult[]> {
  const links = batch.flatMap((row) => {
    const link = row.trace_context === null ? undefined : linkTo(otel, JSON.parse(row.trace_context) as TraceContext);
    return link ? [link] : [];
  });
  const span = otel.trace.getTracer('oncebox').startSpan(`send ${stream.producer}`, {
    kind: otel.SpanKind.PRODUCER,
    links,
    attributes: {
      'messaging.system': 'oncebox',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.destination.name': stream.producer,
      'messaging.batch.message_count': batch.length,
      'oncebox.run_id': stream.runId,
      'oncebox.attempt': stream.attempt,
    },
  });
  const headers: Record<string, string> = {};
  otel.propagation.inject(otel.trace.setSpan(otel.context.active(), span), headers);
  return endingSpan(otel, span, () => send(headers));
}
