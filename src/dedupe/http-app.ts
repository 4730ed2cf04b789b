import { createServer as createHttpServer, STATUS_CODES, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { ZodError } from 'zod';
import rateLimit from '@fastify/rate-limit';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify';
import { assetNameSchema, describeFirstIssue } from '../protocol/emission.js';
import { ProblemCode } from '../protocol/errors.js';
import { Limits } from '../protocol/limits.js';
import {
  emissionBatchSchema,
  eventQuerySchema,
  PROBLEM_CONTENT_TYPE,
  streamParamsSchema,
  exactAttemptClaimSchema,
  nextAttemptClaimSchema,
  type ClaimedAttempt,
  streamQuerySchema,
  type EmissionBatchResponse,
  type Problem,
} from '../protocol/wire.js';
import { echo, nameList } from '../protocol/text.js';
import type { OtelApi } from '../protocol/trace.js';
import { packageVersion } from '../protocol/version.js';
import { boundedPage, waitedPage } from './event-page.js';
import { LongPolls, type LongPollLimits } from './long-polls.js';
import { NewStreamLimiter, NewStreamsExhausted } from './new-streams.js';
import { forbidden, useAuth, type Authenticator, type UnauthorizedLimit } from './auth.js';
import { checkItem, refuseOutOfScope } from './item-check.js';
import { checkLifecycleEvent } from './lifecycle-check.js';
import { useJsonBodyParser } from './json-body.js';
import { malformedQueryNumber } from './query-numbers.js';
import { problem, RequestProblem, sendProblem } from './problem.js';
import type { ServerMetrics } from './metrics.js';
import { openApiDocument } from './openapi.js';
import { tracedIngest } from './tracing.js';
import type { DedupeStore } from './store.js';
import { assetAllowed, causeAllowed, describeGrant, producerAllowed, tokenRequestSchema } from './tokens.js';
import { isLifecycleAsset } from '../protocol/lifecycle.js';

export interface HttpAppOptions {
  store: DedupeStore;
  auth: Authenticator;
  metrics: ServerMetrics;
  /** OpenTelemetry's API when the application has it: a span per batch ingested. */
  otel?: OtelApi | undefined;
  /** Requests one token may make per window; false for no limit. A server without tokens has none. */
  rateLimit: RateLimit | false;
  /** The proxies whose X-Forwarded-For names the client (`request.ip`); none by default. */
  trustProxy?: string[] | undefined;
  bodyLimit: number;
  maxBatchItems: number;
  /** Bytes of JSON in one page of `GET /v1/events`; a page stops early, and `next` says where to go on. */
  maxPageBytes: number;
  logger: FastifyServerOptions['logger'];
  connections: ConnectionLimits;
  longPolls: LongPollLimits;
  /** New streams one token may open per minute. */
  newStreamsPerMinute: number;
}

export interface RateLimit {
  max: number;
  windowMs: number;
}

/** What one client may hold of the server: time to send a request, idle time, and its share of sockets. */
export interface ConnectionLimits {
  requestTimeoutMs: number;
  headersTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnections: number;
}

/** The routes of `docs/protocol.md`, over any DedupeStore. */
export function buildHttpApp(options: HttpAppOptions): FastifyInstance {
  const app = Fastify({
    logger: options.logger,
    bodyLimit: options.bodyLimit,
    ...(options.trustProxy === undefined ? {} : { trustProxy: options.trustProxy }),
    // Closing is answered below, as problem+json like every other refusal.
    return503OnClosing: false,
    serverFactory: (handler) => limitedServer(handler, options.connections),
    // Node refuses some requests before any route sees them (headers too large, a request too slow, a
    // malformed one): those answers are problem+json like every other refusal.
    clientErrorHandler: answerClientError,
    // A path segment may be as long as the longest name the protocol takes, percent-encoded (up to 12
    // characters each): the route's own check then answers a longer name with a message that names it.
    routerOptions: { maxParamLength: Limits.maxNameLength * 12 + 1 },
    // What the router refuses before any route (bad percent-encoding, a segment over maxParamLength) is
    // the client's doing: 400, as problem+json.
    frameworkErrors: (error, _request, reply) =>
      sendProblem(
        reply,
        error.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? problem(400, ProblemCode.InvalidRequest, `a path segment is longer than any name (${Limits.maxNameLength} characters); use shorter names`)
          : problem(400, ProblemCode.InvalidRequest, 'the request target is not a valid URL: check its percent-encoding'),
      ),
  });
  let closing = false;
  app.addHook('onClose', async () => {
    closing = true;
  });
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', async (_request, reply) => {
    if (closing) {
      reply.header('connection', 'close');
      return sendProblem(reply, problem(503, ProblemCode.ShuttingDown, 'this server instance is shutting down; retry the request on another instance or later'));
    }
  });

  // A method that a route does not have is 405, with the methods it has, before any token is asked for:
  // the routes are no secret (GET /openapi.json lists them).
  const routeMethods: { pattern: RegExp; methods: Set<string> }[] = [];
  app.addHook('onRoute', (route) => {
    const pattern = new RegExp(`^${route.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+')}$`);
    let entry = routeMethods.find((candidate) => candidate.pattern.source === pattern.source);
    if (entry === undefined) routeMethods.push((entry = { pattern, methods: new Set() }));
    for (const method of [route.method].flat()) entry.methods.add(method);
    if (entry.methods.has('GET')) entry.methods.add('HEAD');
  });
  app.addHook('onRequest', async (request, reply) => {
    if (!request.is404) return;
    const path = request.url.split('?')[0]!;
    const route = routeMethods.find((candidate) => candidate.pattern.test(path));
    if (route === undefined || route.methods.has(request.method)) return;
    const allowed = [...route.methods].sort().join(', ');
    reply.header('allow', allowed);
    return sendProblem(reply, problem(405, ProblemCode.MethodNotAllowed, `${echo(request.method)} is not a method of ${echo(path)}; it takes ${allowed}`));
  });

  // Only JSON is spoken here; a text body is refused as 415 rather than read as a JSON string.
  app.removeContentTypeParser('text/plain');
  useJsonBodyParser(app, Limits.maxBodyDepth);

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof NewStreamsExhausted) reply.header('retry-after', String(error.retryAfterS));
    if (error instanceof RequestProblem) return sendProblem(reply, error.problem);
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      return sendProblem(
        reply,
        problem(413, ProblemCode.BodyTooLarge, `the request body exceeds ${options.bodyLimit} bytes; send fewer items per request`),
      );
    }
    if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      return sendProblem(reply, problem(415, ProblemCode.UnsupportedMediaType, 'send the body as application/json'));
    }
    if (error instanceof SyntaxError || error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') {
      return sendProblem(reply, problem(400, ProblemCode.MalformedJson, `the body is not valid JSON: ${error.message}`));
    }
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      return sendProblem(reply, problem(status, ProblemCode.InvalidRequest, error.message));
    }
    request.log.error({ err: error }, 'request failed');
    return sendProblem(reply, problem(500, ProblemCode.Internal, 'the server failed to handle this request; retry it'));
  });

  const notFound = (request: FastifyRequest, reply: FastifyReply) =>
    sendProblem(reply, problem(404, ProblemCode.NotFound, `no route for ${request.method} ${echo(request.url.split('?')[0]!)}`));

  // Requests without a live token count against their source address, with the same allowance as a token.
  let unauthorized: UnauthorizedLimit | undefined;
  useAuth(app, options.auth, () => unauthorized);
  app.addHook('onResponse', async (request, reply) => {
    options.metrics.answered(request.method, request.is404 ? undefined : request.routeOptions.url, reply.statusCode, reply.elapsedTime / 1000);
  });
  const limit = options.rateLimit;
  if (limit === false) app.setNotFoundHandler(notFound);
  else {
    // Counted per token after the auth hook (the plugin hooks each route, and route hooks run after the
    // app's): a token's burst never slows another token's producers down.
    void app.register(rateLimit, {
      max: limit.max,
      timeWindow: limit.windowMs,
      keyGenerator: (request) => request.principal,
      // A server without tokens has no one to count against (every client on one host shares an address).
      allowList: (request) => request.principal === '',
      errorResponseBuilder: (_request, context) =>
        new RequestProblem(
          problem(429, ProblemCode.RateLimited, `more than ${context.max} requests in ${limit.windowMs} ms from this token; retry after ${context.after}`),
        ),
    });
    app.after(() => {
      // An unknown path costs a token its allowance like a route does: no route of its own, so the
      // plugin hooks it here.
      app.setNotFoundHandler({ preHandler: app.rateLimit() }, notFound);
      const check = app.createRateLimit({ max: limit.max, timeWindow: limit.windowMs, keyGenerator: (request) => `unauthorized:${request.ip}`, allowList: () => false });
      unauthorized = {
        refused: async (request) => {
          const verdict = await check(request);
          return verdict.isAllowed || !verdict.isExceeded ? undefined : { retryAfterS: Math.max(1, verdict.ttlInSeconds) };
        },
      };
    });
  }
  // Routes go in after the plugins above have loaded, so that the rate limit hooks every one of them.
  void app.register(async (routes) => addRoutes(routes, options));
  return app;
}

function addRoutes(app: FastifyInstance, options: HttpAppOptions): void {
  const { store } = options;
  const longPolls = new LongPolls(options.longPolls);
  const newStreams = new NewStreamLimiter(options.newStreamsPerMinute);
  app.get('/healthz', { config: { access: 'public' } }, async () => ({ ok: true }));

  // The protocol is no secret: clients in other languages are generated from it.
  const openApi = JSON.stringify(openApiDocument(packageVersion()));
  app.get('/openapi.json', { config: { access: 'public' } }, async (_request, reply) => reply.type('application/json').send(openApi));

  app.get('/metrics', { config: { access: 'metrics' } }, async (_request, reply) =>
    reply.type(options.metrics.registry.contentType).send(await options.metrics.registry.metrics()),
  );

  app.post('/v1/emissions', { config: { access: 'publish' } }, async (request, reply) => {
    const parsed = emissionBatchSchema.safeParse(request.body);
    if (!parsed.success) {
      return sendProblem(reply, invalidInput(parsed.error, { input: request.body, knownKeys: ['stream', 'items'] }));
    }
    const { stream, items } = parsed.data;
    const { grant } = request;
    if (!producerAllowed(grant, stream.producer)) {
      return sendProblem(
        reply,
        forbidden(`stream.producer: this token publishes only as producers matching "${echo(grant.producers)}", not as "${echo(stream.producer)}"`, 'stream.producer'),
      );
    }
    if (items.length > options.maxBatchItems) {
      return sendProblem(
        reply,
        problem(
          413,
          ProblemCode.BatchTooLarge,
          `items: at most ${options.maxBatchItems} per request (got ${items.length}); split the batch`,
          'items',
        ),
      );
    }
    const allowed = nameList(grant.assets ?? []);
    // Lifecycle events need no place in the token's list: they are checked to be about this stream instead.
    const checked = items.map((item, index) =>
      refuseOutOfScope(checkLifecycleEvent(checkItem(item, index), stream), (asset) => isLifecycleAsset(asset) || assetAllowed(grant, asset), allowed),
    );
    const started = performance.now();
    const scope = {
      mayCite: (asset: string) => causeAllowed(grant, asset),
      citesNothing: grant.consumes !== null && grant.consumes.length === 0,
      openStream: () => newStreams.take(request.principal),
    };
    const results = await tracedIngest(options.otel, request.headers, stream, checked, () => store.ingest(stream, checked, scope));
    options.metrics.ingested(results, (performance.now() - started) / 1000);
    const body: EmissionBatchResponse = { results };
    return body;
  });

  app.get('/v1/events', { config: { access: 'events' } }, async (request, reply) => {
    const malformed = malformedQueryNumber(request.query, { whole: ['after', 'limit'], decimal: ['wait'] });
    if (malformed) return sendProblem(reply, problem(400, ProblemCode.InvalidRequest, malformed.message, malformed.field));
    const parsed = eventQuerySchema.safeParse(request.query);
    if (!parsed.success) {
      return sendProblem(reply, invalidInput(parsed.error, { input: request.query, knownKeys: ['asset', 'after', 'limit', 'wait'] }));
    }
    const { asset } = parsed.data;
    const { grant } = request;
    if (grant.assets !== null && (asset === undefined || !assetAllowed(grant, asset))) {
      return sendProblem(reply, forbidden(`asset: this token reads only the events of ${nameList(grant.assets)}; ask for one of them with ?asset=`, 'asset'));
    }
    const { wait, ...query } = parsed.data;
    if (wait === 0) return boundedPage(store, query, options.maxPageBytes);
    const admitted = longPolls.admit(request.principal);
    if ('refused' in admitted) {
      options.metrics.waitRefused(admitted.refused);
      reply.header('retry-after', String(admitted.retryAfterS));
      return sendProblem(reply, admitted.problem);
    }
    // A reader that goes away stops waiting: its connection is all it held.
    const gone = new AbortController();
    reply.raw.once('close', () => gone.abort());
    try {
      return await waitedPage(store, query, options.maxPageBytes, wait * 1000, gone.signal);
    } finally {
      admitted.release();
    }
  });

  app.get<{ Params: { producer: string; runId: string } }>('/v1/streams/:producer/:runId', { config: { access: 'streams' } }, async (request, reply) => {
    const parsed = streamQuerySchema.safeParse(request.query);
    if (!parsed.success) {
      return sendProblem(reply, invalidInput(parsed.error, { input: request.query, knownKeys: ['task'] }));
    }
    const params = streamParamsSchema.safeParse(request.params);
    if (!params.success) {
      return sendProblem(reply, invalidInput(params.error, { input: request.params }));
    }
    const { producer, runId } = params.data;
    if (!producerAllowed(request.grant, producer)) {
      return sendProblem(reply, forbidden(`producer: this token reads only the streams of producers matching "${echo(request.grant.producers)}"`, 'producer'));
    }
    const state = await store.streamState(producer, runId, parsed.data.task ?? null);
    if (!state) {
      const task = parsed.data.task === undefined ? '' : ` task ${echo(parsed.data.task)}`;
      return sendProblem(reply, problem(404, ProblemCode.NotFound, `no stream ${echo(producer)}/${echo(runId)}${task} has delivered to this server`));
    }
    return state;
  });

  // Claiming an attempt moves the stream's epoch, so it takes what publishing takes: a publish token of that producer.
  app.post<{ Params: { producer: string; runId: string } }>('/v1/streams/:producer/:runId/attempts', { config: { access: 'publish' } }, async (request, reply) => {
    const params = streamParamsSchema.safeParse(request.params);
    if (!params.success) {
      return sendProblem(reply, invalidInput(params.error, { input: request.params }));
    }
    // No body is an empty claim; a body that is not an object (null, a number) is refused like any.
    const given: unknown = request.body === undefined ? {} : request.body;
    if (typeof given === 'object' && given !== null && 'atLeast' in given && 'exactly' in given) {
      return sendProblem(reply, problem(400, ProblemCode.InvalidRequest, 'exactly: give atLeast (the next attempt, at least this) or exactly (this attempt or none), not both', 'exactly'));
    }
    // Checked against the shape the body chose, so that a bad `exactly` is told as such, not as a field
    // the other shape does not know.
    const chosen = typeof given === 'object' && given !== null && 'exactly' in given ? exactAttemptClaimSchema : nextAttemptClaimSchema;
    const body = chosen.safeParse(given);
    if (!body.success) {
      return sendProblem(reply, invalidInput(body.error, { input: given, knownKeys: ['task', 'atLeast', 'exactly'] }));
    }
    const { producer, runId } = params.data;
    if (!producerAllowed(request.grant, producer)) {
      return sendProblem(reply, forbidden(`producer: this token publishes only as producers matching "${echo(request.grant.producers)}", not as "${echo(producer)}"`, 'producer'));
    }
    const { task } = body.data;
    const claim = 'exactly' in body.data ? { exactly: body.data.exactly } : { atLeast: body.data.atLeast ?? 1 };
    const decision = await store.claimAttempt(producer, runId, task, claim, {
      openStream: () => newStreams.take(request.principal),
    });
    if ('refused' in decision) {
      const code = decision.refused === 'taken' ? ProblemCode.AttemptTaken : ProblemCode.AttemptTooHigh;
      return sendProblem(reply, { ...problem(409, code, decision.detail, 'exactly' in claim ? 'exactly' : 'atLeast'), epoch: decision.epoch });
    }
    const claimed: ClaimedAttempt = { attempt: decision.granted };
    return reply.code(201).send(claimed);
  });

  // A token limited to assets sees only those: the list is no more public than the events.
  app.get('/v1/assets', { config: { access: 'events' } }, async (request) => ({
    assets: (await store.listAssets()).filter((asset) => assetAllowed(request.grant, asset)),
  }));

  app.put<{ Params: { name: string } }>('/v1/assets/:name', { config: { access: 'admin' } }, async (request, reply) => {
    const parsed = assetNameSchema.safeParse(request.params.name);
    if (!parsed.success) {
      return sendProblem(reply, invalidInput(parsed.error, { input: request.params.name, prefix: 'name' }, 'name'));
    }
    const { created } = await store.registerAsset(parsed.data);
    return reply.status(created ? 201 : 200).send({ name: parsed.data, created });
  });

  app.post('/v1/tokens', { config: { access: 'admin' } }, async (request, reply) => {
    const parsed = tokenRequestSchema.safeParse(request.body);
    if (!parsed.success) {
      return sendProblem(reply, invalidInput(parsed.error, { input: request.body, knownKeys: ['scope', 'producers', 'assets', 'reads', 'consumes', 'note'] }));
    }
    const created = await store.tokens.create(parsed.data);
    return reply.status(201).send({ ...created.info, token: created.token, allows: describeGrant(created.info) });
  });

  app.get('/v1/tokens', { config: { access: 'admin' } }, async () => ({ tokens: await store.tokens.list() }));

  app.delete<{ Params: { id: string } }>('/v1/tokens/:id', { config: { access: 'admin' } }, async (request, reply) => {
    if (!TOKEN_ID.test(request.params.id)) {
      return sendProblem(reply, problem(400, ProblemCode.InvalidRequest, `id: a token id is 16 hex digits, such as 0123456789abcdef; oncebox token list shows them (got "${echo(request.params.id)}")`, 'id'));
    }
    const revoked = await store.tokens.revoke(request.params.id);
    if (!revoked) return sendProblem(reply, problem(404, ProblemCode.NotFound, `no token ${echo(request.params.id)}; oncebox token list shows the ids`));
    options.auth.forget();
    return revoked;
  });
}

/** The id part of a token, as `oncebox token list` shows it. */
const TOKEN_ID = /^[0-9a-f]{16}$/;

/** Node's own refusals, by the code of the parse or timeout error behind them. */
/** The 400 answer to input a schema refused: its first issue, with the field it names (or `field`). */
function invalidInput(error: ZodError, described: Parameters<typeof describeFirstIssue>[1], field?: string): Problem {
  const issue = describeFirstIssue(error, described);
  return problem(400, ProblemCode.InvalidRequest, issue.message, field ?? issue.field);
}

const CLIENT_ERRORS: Record<string, [number, string, string]> = {
  HPE_HEADER_OVERFLOW: [431, ProblemCode.InvalidRequest, 'the request headers are too large; send fewer or shorter headers'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, ProblemCode.RequestTimeout, 'the request was not received in time; send it whole, without pauses'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, ProblemCode.BodyTooLarge, 'the chunk extensions are too large'],
};

function answerClientError(error: Error & { code?: string }, socket: Socket): void {
  const [status, code, detail] = CLIENT_ERRORS[error.code ?? ''] ?? [400, ProblemCode.InvalidRequest, 'the request is not valid HTTP/1.1'];
  answerOnSocket(socket, status, code, detail);
}

/** Writes a problem+json answer straight to the socket, then closes it: for requests no route sees. */
function answerOnSocket(socket: Socket | Duplex, status: number, code: string, detail: string): void {
  // Only when nothing was written yet: a half-written answer must not get a second one.
  if (socket.writable && (!('bytesWritten' in socket) || socket.bytesWritten === 0)) {
    const body = JSON.stringify(problem(status, code, detail));
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/**
 * The HTTP server with the connection limits applied. Node checks the request and header timeouts only
 * every `connectionsCheckingInterval` (30 s by default), so it is set to a fraction of them: a client
 * that trickles bytes is cut off close to its deadline.
 */
function limitedServer(handler: RequestListener, limits: ConnectionLimits): Server {
  const server = createHttpServer(
    {
      requestTimeout: limits.requestTimeoutMs,
      headersTimeout: limits.headersTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
    },
    handler,
  );
  server.maxConnections = limits.maxConnections;
  // Node hands these to listeners of their own, never to the routes; unheard, CONNECT would be a socket
  // closed without an answer, and a strange Expect a 417 without a body.
  server.on('connect', (request: IncomingMessage, socket: Duplex) =>
    answerOnSocket(socket, 405, ProblemCode.MethodNotAllowed, 'CONNECT is not a method of this server: it is no proxy'),
  );
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
    const body = JSON.stringify(problem(417, ProblemCode.ExpectationFailed, `expect: ${echo(String(request.headers.expect))} is not met here; send no Expect header, or 100-continue`));
    response.writeHead(417, { 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8`, 'content-length': Buffer.byteLength(body), connection: 'close' });
    response.end(body);
  });
  return server;
}
