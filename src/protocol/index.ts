/**
 * `oncebox/protocol`: the wire protocol's types and schemas, and every error code.
 * @packageDocumentation
 * @module oncebox/protocol
 */
export * from './errors.js';
export * from './wire.js';
export { Limits } from './limits.js';
export { canonicalJson, payloadFingerprint, type FingerprintedPayload } from './canonical-json.js';
export { traceContextSchema, type TraceContext } from './trace.js';
export type { EmissionPayload } from './emission.js';
export * from './catalog.js';
