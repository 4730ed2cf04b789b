import { z } from 'zod';
import { plainText } from './text.js';

/**
 * The W3C trace context an emission was committed in: it travels with the item, is stored with the
 * event, and comes back to readers, so that a downstream run can join the producer's trace. It is
 * metadata, not payload: it is in no key or fingerprint, and a retry in another trace is still a
 * duplicate of the first delivery, whose trace context the event keeps.
 */
export interface TraceContext {
  /** `version-traceid-parentid-flags`, as in the W3C traceparent header. */
  traceparent: string;
  tracestate?: string | undefined;
}

export const traceContextSchema = z.strictObject({
  traceparent: z.string().regex(/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/, {
    error: 'must be a W3C traceparent such as "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"',
  }),
  tracestate: plainText(z.string().max(512, { error: 'must be at most 512 characters' })).optional(),
});

/**
 * OpenTelemetry's API, when the application has it installed (`@opentelemetry/api` is an optional peer
 * dependency): without it, or without a tracer provider registered, oncebox makes no spans and
 * captures no context.
 * @internal
 */
export type OtelApi = typeof import('@opentelemetry/api');

let otel: Promise<OtelApi | undefined> | undefined;

/** @internal */
export function loadOtel(): Promise<OtelApi | undefined> {
  otel ??= import('@opentelemetry/api').then(
    (api) => api,
    () => undefined,
  );
  return otel;
}

/** The active trace context, as W3C headers; undefined when there is none. @internal */
export function activeTraceContext(api: OtelApi | undefined): TraceContext | undefined {
  if (!api) return undefined;
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.context.active(), carrier);
  if (carrier.traceparent === undefined) return undefined;
  return carrier.tracestate === undefined ? { traceparent: carrier.traceparent } : { traceparent: carrier.traceparent, tracestate: carrier.tracestate };
}

/** The span context a stored trace context names, for a span link. @internal */
export function linkTo(api: OtelApi, trace: TraceContext): import('@opentelemetry/api').Link | undefined {
  const context = api.propagation.extract(api.ROOT_CONTEXT, trace);
  const spanContext = api.trace.getSpanContext(context);
  return spanContext && api.isSpanContextValid(spanContext) ? { context: spanContext } : undefined;
}

/** Runs `work` for a span: records a failure on it, and ends it either way. @internal */
export async function endingSpan<T>(otel: OtelApi, span: import('@opentelemetry/api').Span, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    span.recordException(error as Error);
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: (error as Error).message });
    throw error;
  } finally {
    span.end();
  }
}
