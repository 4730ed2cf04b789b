import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ZodObject, type z } from 'zod';
import {
  assetQuerySchema,
  consumerQuerySchema,
  overviewQuerySchema,
  partitionParamsSchema,
  partitionQuerySchema,
  rejectionQuerySchema,
  streamDetailQuerySchema,
  streamListQuerySchema,
} from '../../protocol/catalog.js';
import { ProblemCode } from '../../protocol/errors.js';
import { echo, nameList } from '../../protocol/text.js';
import { streamParamsSchema } from '../../protocol/wire.js';
import { forbidden } from '../auth.js';
import type { CatalogScope } from '../catalog/catalog.js';
import { CatalogGate } from '../catalog/gate.js';
import type { HttpAppOptions } from '../http-options.js';
import { invalidInput, problem, RequestProblem, sendProblem } from '../problem.js';
import { malformedQueryNumber } from '../query-numbers.js';
import { mayReadEvents, producerAllowed, readableAssets } from '../tokens.js';

/**
 * The catalog (`GET /v1/catalog/…`): what the server holds, listed for people and the console. Each list
 * is paged by `after`/`next` and scoped by the token like the reads it summarises: assets and partitions
 * as events are (a token limited to assets sees those), streams, consumer groups and refusals as stream
 * state is (by the token's producers).
 */
export function addCatalogRoutes(app: FastifyInstance, options: HttpAppOptions): void {
  const { catalog } = options.store;
  // The catalog's reads take turns, and a share of the time: publishers have the rest (gate.ts).
  const gate = options.catalogGate ?? new CatalogGate();

  app.get('/v1/catalog', { config: { access: 'catalog' } }, async (request) => {
    parsed(request.query, overviewQuerySchema);
    return gate.run(readerOf(request), () => catalog.overview(scopeOf(request)));
  });

  app.get('/v1/catalog/assets', { config: { access: 'events' } }, async (request) =>
    gate.run(readerOf(request), () => catalog.assets(parsed(request.query, assetQuerySchema, ['limit']), scopeOf(request))),
  );

  app.get('/v1/catalog/assets/:asset/partitions', { config: { access: 'events' } }, async (request, reply) => {
    const { asset } = parsed(request.params, partitionParamsSchema);
    const query = parsed(request.query, partitionQuerySchema, ['limit']);
    const readable = readableAssets(request.grant);
    if (readable !== null && !readable.includes(asset)) {
      return sendProblem(reply, forbidden(`asset: this token reads only the events of ${nameList(readable)}`, 'asset'));
    }
    const page = await gate.run(readerOf(request), () => catalog.partitions(asset, query));
    if (!page) return notFound(reply, `no asset ${echo(asset)} is registered or has events on this server`);
    return page;
  });

  app.get('/v1/catalog/streams', { config: { access: 'streams' } }, async (request) =>
    gate.run(readerOf(request), () => catalog.streams(parsed(request.query, streamListQuerySchema, ['limit']), scopeOf(request))),
  );

  app.get('/v1/catalog/streams/:producer/:runId', { config: { access: 'streams' } }, async (request, reply) => {
    const { producer, runId } = parsed(request.params, streamParamsSchema);
    const { task } = parsed(request.query, streamDetailQuerySchema);
    if (!producerAllowed(request.grant, producer)) {
      return sendProblem(reply, forbidden(`producer: this token reads only the streams of producers matching "${echo(request.grant.producers)}"`, 'producer'));
    }
    const detail = await gate.run(readerOf(request), () => catalog.stream(producer, runId, task ?? null));
    if (!detail) return notFound(reply, `no stream ${echo(producer)}/${echo(runId)}${task === undefined ? '' : ` task ${echo(task)}`} on this server`);
    return detail;
  });

  app.get('/v1/catalog/consumers', { config: { access: 'streams' } }, async (request) =>
    gate.run(readerOf(request), () => catalog.consumers(parsed(request.query, consumerQuerySchema, ['limit']), scopeOf(request))),
  );

  app.get('/v1/catalog/rejections', { config: { access: 'streams' } }, async (request) =>
    gate.run(readerOf(request), () => catalog.rejections(parsed(request.query, rejectionQuerySchema, ['limit']), scopeOf(request))),
  );
}

/** Who a catalog read is of, for its turn: its token, or on a server without tokens its address. */
function readerOf(request: FastifyRequest): string {
  return request.principal || `address:${request.ip}`;
}

/**
 * What the request's token may see of the catalog. Counts over events (a group's lag, an asset's events)
 * only for assets it reads the events of: none for a token that reads no events, whatever its asset list.
 */
function scopeOf(request: FastifyRequest): CatalogScope {
  return { assets: mayReadEvents(request.grant) ? readableAssets(request.grant) : [], producers: request.grant.producers };
}

/** A query or path parsed by its schema, or a 400 naming the first thing wrong. */
function parsed<Schema extends z.ZodType>(input: unknown, schema: Schema, wholeNumbers: readonly string[] = []): z.output<Schema> {
  const malformed = malformedQueryNumber(input, { whole: wholeNumbers });
  if (malformed) throw new RequestProblem(problem(400, ProblemCode.InvalidRequest, malformed.message, malformed.field));
  const result = schema.safeParse(input);
  if (!result.success) {
    const knownKeys = schema instanceof ZodObject ? Object.keys(schema.shape) : undefined;
    throw new RequestProblem(invalidInput(result.error, { input, ...(knownKeys ? { knownKeys } : {}) }));
  }
  return result.data;
}

function notFound(reply: FastifyReply, detail: string) {
  return sendProblem(reply, problem(404, ProblemCode.NotFound, detail));
}
