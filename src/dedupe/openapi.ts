import { z } from 'zod';
import { assetNameSchema, emissionPayloadSchema } from '../protocol/emission.js';
import { ProblemCode, RejectionCode } from '../protocol/errors.js';
import { Limits } from '../protocol/limits.js';
import { traceContextSchema } from '../protocol/trace.js';
import { RUN_KEYS_HEADER } from '../protocol/run-keys.js';
import {
  checkpointItemFieldsSchema,
  attemptClaimSchema,
  emissionBatchSchema,
  eventCauseSchema,
  type ClaimedAttempt,
  eventQuerySchema,
  itemPositionSchema,
  PROBLEM_CONTENT_TYPE,
  storedEventSchema,
  streamIdentitySchema,
  streamParamsSchema,
  streamQuerySchema,
  type EmissionBatch,
  type EmissionBatchResponse,
  type EventPage,
  type Problem,
  type StreamState,
} from '../protocol/wire.js';
import type { Same } from '../protocol/same-type.js';
import {
  assetQuerySchema,
  assetSummarySchema,
  consumerGroupSchema,
  consumerQuerySchema,
  overviewSchema,
  pageSchema,
  partitionPageSchema,
  partitionParamsSchema,
  partitionQuerySchema,
  rejectionQuerySchema,
  rejectionSchema,
  streamDetailQuerySchema,
  streamDetailSchema,
  streamListQuerySchema,
  streamSummarySchema,
} from '../protocol/catalog.js';
import { tokenRequestSchema, type TokenInfo } from './tokens.js';

/**
 * The OpenAPI 3.1 document of the wire protocol, generated from the zod schemas the server validates
 * requests with, so that it cannot drift from them. The answers' schemas are written here and checked
 * against the TypeScript types of `src/protocol/wire.ts` at compile time (`Same<…>` below). Served at
 * `GET /openapi.json`; `docs/openapi.json` is a copy, checked by `npm test`.
 */

const eventItemSchema = z.strictObject({
  ...itemPositionSchema.shape,
  kind: z.literal('event'),
  ...emissionPayloadSchema().shape,
  trace: traceContextSchema.optional().describe('The W3C trace context the emission was committed in: metadata, in neither key nor fingerprint.'),
  cause: eventCauseSchema.optional().describe("The stored event this one responds to (a consumer's emission), by cursor; the server derives the lineage from it."),
});
const checkpointItemSchema = z.strictObject({ ...itemPositionSchema.shape, kind: z.literal('checkpoint'), ...checkpointItemFieldsSchema.shape });
const batchSchema = emissionBatchSchema.extend({
  items: z.array(z.discriminatedUnion('kind', [eventItemSchema, checkpointItemSchema])).min(1).max(Limits.maxBatchItems),
});

const seq = z.number().int().min(1);
const key = z.uuid();
const itemResultSchema = z.discriminatedUnion('status', [
  z.object({ status: z.enum(['accepted', 'duplicate']), seq, key, eventId: z.uuid(), timestamp: z.iso.datetime() }),
  z.object({ status: z.literal('conflict'), seq, key, code: z.literal('key_conflict'), detail: z.string() }),
  z.object({
    status: z.literal('rejected'),
    seq: seq.nullable(),
    key: key.nullable(),
    code: z.enum(Object.values(RejectionCode) as [RejectionCode, ...RejectionCode[]]),
    detail: z.string(),
    field: z.string().optional(),
  }),
  z.object({ status: z.literal('gap'), seq, key, expectedSeq: seq }).describe('Transient: resend from expectedSeq.'),
  z.object({ status: z.literal('checkpointed'), seq, key }),
  z.object({ status: z.literal('fenced'), seq: seq.nullable(), key: key.nullable(), code: z.literal('fenced'), epoch: z.number().int(), detail: z.string() }),
]);
const batchResponseSchema = z.object({ results: z.array(itemResultSchema) });
const streamStateSchema = z.object({
  producer: z.string(),
  runId: z.string(),
  task: z.string().nullable(),
  epoch: z.number().int().describe('The highest attempt that has delivered anything; items of lower attempts are fenced.'),
  attempts: z.array(z.object({ attempt: z.number().int(), lastSeq: z.number().int() })),
  checkpoints: z.record(z.string(), z.unknown()).describe('The mirrored checkpoints, by name.'),
});
const claimedAttemptSchema = z.object({ attempt: z.number().int().describe('The attempt claimed: the stream\'s epoch now; every lower attempt is fenced.') });
const eventPageSchema = z.object({
  events: z.array(storedEventSchema),
  next: z.number().int().describe('Pass as `after` for the next page; equal to `after` when the page is empty.'),
});
const problemSchema = z.object({
  type: z.string(),
  title: z.string(),
  status: z.number().int(),
  detail: z.string(),
  code: z.enum(Object.values(ProblemCode) as [ProblemCode, ...ProblemCode[]]),
  field: z.string().optional(),
  instance: z.string().optional(),
  epoch: z.number().int().optional().describe('On attempt_taken and attempt_too_high: the run\'s epoch, which a new claim must go above.'),
});
const tokenInfoSchema = z.object({
  id: z.string(),
  scope: z.enum(['publish', 'read', 'admin']),
  producers: z.string(),
  assets: z.array(z.string()).nullable(),
  reads: z.array(z.enum(['events', 'streams', 'metrics'])),
  consumes: z.array(z.string()).nullable(),
  note: z.string(),
  createdAt: z.iso.datetime(),
  revokedAt: z.iso.datetime().nullable(),
});

// The answers' schemas are the wire types, or this file does not compile.
const answersMatchTheWireTypes: [
  Same<z.infer<typeof batchResponseSchema>, Omit<EmissionBatchResponse, 'results'> & { results: z.infer<typeof itemResultSchema>[] }>,
  Same<z.infer<typeof itemResultSchema>['status'], EmissionBatchResponse['results'][number]['status']>,
  Same<z.infer<typeof streamStateSchema>, StreamState>,
  Same<z.infer<typeof eventPageSchema>, EventPage>,
  Same<Omit<z.infer<typeof problemSchema>, 'code'>, Omit<Problem, 'code'>>,
  Same<z.infer<typeof tokenInfoSchema>, TokenInfo>,
  Same<z.infer<typeof claimedAttemptSchema>, ClaimedAttempt>,
  // The request the relay sends (encodeBatch) is the one the server validates.
  Same<z.input<typeof batchSchema>, EmissionBatch>,
] = [true, true, true, true, true, true, true, true];
void answersMatchTheWireTypes;

const schemas = {
  EmissionBatch: batchSchema,
  StreamIdentity: streamIdentitySchema,
  EventItem: eventItemSchema,
  CheckpointItem: checkpointItemSchema,
  EmissionBatchResponse: batchResponseSchema,
  ItemResult: itemResultSchema,
  StreamState: streamStateSchema,
  StoredEvent: storedEventSchema,
  EventPage: eventPageSchema,
  Problem: problemSchema,
  TokenRequest: tokenRequestSchema,
  TokenInfo: tokenInfoSchema,
};

/** JSON Schema of a zod schema, as OpenAPI 3.1 takes it; a named one becomes a reference. */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const named = Object.entries(schemas).find(([, candidate]) => candidate === schema)?.[0];
  if (named) return { $ref: `#/components/schemas/${named}` };
  return toJson(schema, io);
}

function toJson(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const json = z.toJSONSchema(schema, {
    io,
    target: 'draft-2020-12',
    // `extra` and checkpoint values are checked in code (canonical JSON, a size bound), not by a type.
    unrepresentable: 'any',
  }) as Record<string, unknown>;
  delete json.$schema;
  return json;
}

const problemResponse = (description: string) => ({ description, content: { [PROBLEM_CONTENT_TYPE]: { schema: jsonSchema(problemSchema, 'output') } } });
const json = (schema: z.ZodType, description: string) => ({ description, content: { 'application/json': { schema: jsonSchema(schema, 'output') } } });
const refusals = {
  '400': problemResponse('The request is malformed; `field` names what.'),
  '401': problemResponse('No live token.'),
  '403': problemResponse("The token's scope does not cover this."),
  '429': problemResponse("The token's rate limit, or its share of waiting reads or of new streams; see Retry-After."),
  '408': problemResponse('The request took longer than requestTimeoutMs to arrive.'),
  '431': problemResponse('The request line and headers exceed what Node takes (16 KiB).'),
  '417': problemResponse('An Expect header other than 100-continue.'),
  '503': problemResponse('The instance is shutting down, holds as many waiting reads as it takes, or (a catalog read) ran past its time limit; retry on another instance or after Retry-After.'),
};

/** What a route that reads a body may answer besides: the body's size and type. */
const bodyRefusals = {
  '413': problemResponse('The body or the batch is too large.'),
  '415': problemResponse('Not application/json in UTF-8.'),
};

function queryParameters(schema: z.ZodObject) {
  return Object.entries(schema.shape).map(([name, field]) => ({ name, in: 'query', required: false, schema: toJson(field as z.ZodType, 'input') }));
}

function pathParameters(schema: z.ZodObject) {
  return Object.entries(schema.shape).map(([name, field]) => ({ name, in: 'path', required: true, schema: toJson(field as z.ZodType, 'input') }));
}

/**
 * The OpenAPI document of every route. It is long because it is the document itself, one entry per
 * route and answer, built from the same zod schemas the routes validate with.
 */
export function openApiDocument(version: string): Record<string, unknown> {
  const bearer = [{ bearer: [] }];
  return {
    openapi: '3.1.0',
    info: {
      title: 'oncebox',
      version,
      description:
        'Effectively-once event publication from batch jobs. docs/protocol.md describes the protocol for people; this document is generated from the schemas the server validates with.',
    },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'A token of oncebox token create (obx_…), or the server token.' } },
      schemas: Object.fromEntries(Object.entries(schemas).map(([name, schema]) => [name, toJson(schema, name === 'TokenRequest' || name === 'EmissionBatch' ? 'input' : 'output')])),
    },
    security: bearer,
    paths: {
      '/healthz': { get: { summary: 'Liveness', security: [], responses: { '200': json(z.object({ ok: z.literal(true) }), 'The server is up.') } } },
      '/v1/emissions': {
        post: {
          summary: 'Deliver a batch of one stream: events and checkpoint updates, in sequence order',
          description: 'Needs a publish token covering stream.producer. One result per item, in the items\' order.',
          // As the server checks it: the envelope strictly, each item on its own, so that one bad item gets a
          // result of its own (rejected) rather than failing the batch. An item must be an EventItem or a
          // CheckpointItem (the EmissionBatch schema) to be taken.
          parameters: [
            {
              name: RUN_KEYS_HEADER,
              in: 'header',
              required: false,
              description:
                "The positions of the items whose keys are this stream's run's alone (derived from the run and a partition key), as ranges: " +
                '"0-499", "0,2,5-9". A store may file those beside the run\'s other keys. Metadata: a key is one event with or without it.',
              // No leading or trailing whitespace: HTTP trims it from a header value, and clients refuse it.
              schema: { type: 'string', maxLength: 8192, pattern: '^\\d{1,4}(-\\d{1,4})?(, ?\\d{1,4}(-\\d{1,4})?)*$' },
            },
          ],
          requestBody: {
            required: true,
            description: 'Each item is checked on its own against EventItem or CheckpointItem (see EmissionBatch); one that fails is answered rejected.',
            content: { 'application/json': { schema: toJson(emissionBatchSchema, 'input') } },
          },
          responses: {
            '200': json(batchResponseSchema, 'One result per item.'),
            ...refusals,
            ...bodyRefusals,
          },
        },
      },
      '/v1/events': {
        get: {
          summary: 'Page the stored events by cursor',
          description:
            'Needs a read token with reads `events`, or a publish token that consumes assets. A token limited to some assets (a read ' +
            "token's `assets`, a publish token's `consumes`) reads only those: all of them when it names no `asset`, and 403 for any other.",
          parameters: queryParameters(eventQuerySchema),
          responses: { '200': json(eventPageSchema, 'A page of events; `next` is the cursor to go on from.'), ...refusals },
        },
      },
      '/v1/streams/{producer}/{runId}': {
        get: {
          summary: "A run's stream state: epoch, last sequence numbers, mirrored checkpoints",
          parameters: [...pathParameters(streamParamsSchema), ...queryParameters(streamQuerySchema)],
          responses: { '200': json(streamStateSchema, 'The stream state.'), ...refusals, '404': problemResponse('The stream never delivered.') },
        },
      },
      '/v1/streams/{producer}/{runId}/attempts': {
        post: {
          summary: "Claim an attempt of a run: it becomes the epoch at once, fencing every lower attempt",
          description:
            'Needs a publish token covering the producer. Two claims never get the same attempt. With `atLeast` (or nothing), the run\'s next attempt; ' +
            'with `exactly`, that attempt only while it is above the epoch, for a counter the caller takes under a lock of its own (the BullMQ adapter). ' +
            'For job runners whose own attempt counters are unsafe, and for consumers.',
          parameters: pathParameters(streamParamsSchema),
          requestBody: { required: false, content: { 'application/json': { schema: toJson(attemptClaimSchema, 'input') } } },
          responses: {
            '201': json(claimedAttemptSchema, 'The claimed attempt.'),
            ...refusals,
            ...bodyRefusals,
            '409': problemResponse('attempt_taken: the `exactly` attempt is not above the epoch (the problem\'s `epoch` says where it is); attempt_too_high: more than the server\'s maxAttemptStep above the epoch, or past the last attempt.'),
          },
        },
      },
      '/v1/token': {
        get: {
          summary: "What the caller's token may do (any valid token; never its secret)",
          responses: { '200': json(tokenInfoSchema.pick({ scope: true, producers: true, assets: true, consumes: true, reads: true }), 'Its scope.'), ...refusals },
        },
      },
      '/v1/assets': { get: { summary: 'The registered assets', responses: { '200': json(z.object({ assets: z.array(z.string()) }), 'Asset names.'), ...refusals } } },
      '/v1/assets/{name}': {
        put: {
          summary: 'Register an asset (admin)',
          parameters: [{ name: 'name', in: 'path', required: true, schema: toJson(assetNameSchema, 'input') }],
          responses: {
            '200': json(z.object({ name: z.string(), created: z.literal(false) }), 'Known already.'),
            '201': json(z.object({ name: z.string(), created: z.literal(true) }), 'Registered.'),
            ...refusals,
          },
        },
      },
      '/v1/tokens': {
        get: { summary: 'The tokens, without secrets (admin)', responses: { '200': json(z.object({ tokens: z.array(tokenInfoSchema) }), 'Every token.'), ...refusals } },
        post: {
          summary: 'Create a scoped token (admin); the secret is in this answer only',
          requestBody: { required: true, content: { 'application/json': { schema: jsonSchema(tokenRequestSchema, 'input') } } },
          responses: { '201': json(tokenInfoSchema.extend({ token: z.string(), allows: z.string() }), 'The token, with its secret.'), ...refusals, ...bodyRefusals },
        },
      },
      '/v1/tokens/{id}': {
        delete: {
          summary: 'Revoke a token (admin)',
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', pattern: '^[0-9a-f]{16}$' } }],
          responses: { '200': json(tokenInfoSchema, 'The revoked token.'), ...refusals, '404': problemResponse('No such token.') },
        },
      },
      '/v1/catalog': {
        get: {
          summary: "The console's overview: assets, runs in progress, consumer groups with their lag, refusals of the last day",
          description: 'Needs a token that may read both events and streams: a read token with reads events and streams, a publish token that consumes assets (with its own producers\' streams), or admin.',
          responses: { '200': json(overviewSchema, 'The overview, scoped by the token.'), ...refusals },
        },
      },
      '/v1/catalog/assets': {
        get: {
          summary: 'Assets with their event count, partitions seen, duplicates absorbed and newest event, by name',
          description: 'Needs a token that reads events; a token limited to some assets lists those.',
          parameters: queryParameters(assetQuerySchema),
          responses: { '200': json(pageSchema(assetSummarySchema), 'A page of assets.'), ...refusals },
        },
      },
      '/v1/catalog/assets/{asset}/partitions': {
        get: {
          summary: "An asset's partitions by key: each one's newest event (run and attempt), its state and the duplicates absorbed",
          parameters: [...pathParameters(partitionParamsSchema), ...queryParameters(partitionQuerySchema)],
          responses: { '200': json(partitionPageSchema, 'A page of partitions, with the asset.'), ...refusals, '404': problemResponse('No such asset.') },
        },
      },
      '/v1/catalog/streams': {
        get: {
          summary: 'Streams (runs and consumer groups), newest delivery first: epoch, attempts, fenced attempts, checkpoints, outcome',
          description: "Needs a token that reads streams; it lists the streams of the producers the token covers.",
          parameters: queryParameters(streamListQuerySchema),
          responses: { '200': json(pageSchema(streamSummarySchema), 'A page of streams.'), ...refusals },
        },
      },
      '/v1/catalog/streams/{producer}/{runId}': {
        get: {
          summary: "One stream whole: its attempts, which fenced which, its lifecycle events (held emissions, failures) and its refusals",
          parameters: [...pathParameters(streamParamsSchema), ...queryParameters(streamDetailQuerySchema)],
          responses: { '200': json(streamDetailSchema, 'The stream.'), ...refusals, '404': problemResponse('No such stream.') },
        },
      },
      '/v1/catalog/consumers': {
        get: {
          summary: 'Consumer groups with their cursor, epoch, lag and last fetch',
          parameters: queryParameters(consumerQuerySchema),
          responses: { '200': json(pageSchema(consumerGroupSchema), 'A page of consumer groups.'), ...refusals },
        },
      },
      '/v1/catalog/rejections': {
        get: {
          summary: 'Items the server refused for good, newest first, with the code, the reason and the fix',
          description: "The refused rows wait dead in each job's outbox file; `oncebox dead retry` sends them again once the cause is fixed.",
          parameters: queryParameters(rejectionQuerySchema),
          responses: { '200': json(pageSchema(rejectionSchema), 'A page of refusals.'), ...refusals },
        },
      },
      '/metrics': {
        get: { summary: 'Prometheus metrics (admin, or a read token with reads "metrics")', responses: { '200': { description: 'Prometheus text format 0.0.4.', content: { 'text/plain': {} } }, ...refusals } },
      },
      '/openapi.json': { get: { summary: 'This document', security: [], responses: { '200': { description: 'OpenAPI 3.1.', content: { 'application/json': {} } } } } },
    },
  };
}
