import rateLimit from '@fastify/rate-limit';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { ProblemCode } from '../protocol/errors.js';
import { Limits } from '../protocol/limits.js';
import { echo } from '../protocol/text.js';
import { packageVersion } from '../protocol/version.js';
import { useAuth, type UnauthorizedLimit } from './auth.js';
import { CatalogBusyError } from './catalog/database.js';
import { answerClientError, limitedServer } from './connections.js';
import type { HttpAppOptions, RateLimit } from './http-options.js';
import { useJsonBodyParser } from './json-body.js';
import { LongPolls } from './long-polls.js';
import { NewStreamLimiter, NewStreamsExhausted } from './new-streams.js';
import { openApiDocument } from './openapi.js';
import { problem, RequestProblem, sendProblem } from './problem.js';
import { addAdminRoutes } from './routes/admin.js';
import { addCatalogRoutes } from './routes/catalog.js';
import { addConsoleRoutes } from './routes/console.js';
import { addPublishingRoutes } from './routes/publishing.js';
import { addReadingRoutes } from './routes/reading.js';


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
  answerWhileClosing(app);
  answerWrongMethods(app);

  // Only JSON is spoken here; a text body is refused as 415 rather than read as a JSON string.
  app.removeContentTypeParser('text/plain');
  useJsonBodyParser(app, Limits.maxBodyDepth);
  setErrorAnswers(app, options.bodyLimit);

  const notFound = (request: FastifyRequest, reply: FastifyReply) =>
    sendProblem(reply, problem(404, ProblemCode.NotFound, `no route for ${request.method} ${echo(request.url.split('?')[0]!)}`));

  // Requests without a live token count against their source address, with the same allowance as a token.
  let unauthorized: UnauthorizedLimit | undefined;
  useAuth(app, options.auth, () => unauthorized);
  app.addHook('onResponse', async (request, reply) => {
    options.metrics.answered(request.method, request.is404 ? undefined : request.routeOptions.url, reply.statusCode, reply.elapsedTime / 1000);
  });
  useRateLimit(app, options.rateLimit, notFound, (limit) => (unauthorized = limit));
  // Routes go in after the plugins above have loaded, so that the rate limit hooks every one of them.
  void app.register(async (routes) => addRoutes(routes, options));
  return app;
}

function addRoutes(app: FastifyInstance, options: HttpAppOptions): void {
  app.get('/healthz', { config: { access: 'public' } }, async () => ({ ok: true }));

  // The protocol is no secret: clients in other languages are generated from it.
  const openApi = JSON.stringify(openApiDocument(packageVersion()));
  app.get('/openapi.json', { config: { access: 'public' } }, async (_request, reply) => reply.type('application/json').send(openApi));

  app.get('/metrics', { config: { access: 'metrics' } }, async (_request, reply) =>
    reply.type(options.metrics.registry.contentType).send(await options.metrics.registry.metrics()),
  );
  addPublishingRoutes(app, options, new NewStreamLimiter(options.newStreamsPerMinute));
  addReadingRoutes(app, options, new LongPolls(options.longPolls));
  addAdminRoutes(app, options);
  addCatalogRoutes(app, options);
  addConsoleRoutes(app);
}

/** While the server closes, every request is answered 503 and its connection closed. */
function answerWhileClosing(app: FastifyInstance): void {
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
}

/**
 * A method that a route does not have is 405, with the methods it has, before any token is asked for:
 * the routes are no secret (GET /openapi.json lists them).
 */
function answerWrongMethods(app: FastifyInstance): void {
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
}

/** Every refusal fastify or a parser raises, as problem+json; anything else is a 500 the log names. */
function setErrorAnswers(app: FastifyInstance, bodyLimit: number): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof NewStreamsExhausted) reply.header('retry-after', String(error.retryAfterS));
    if (error instanceof RequestProblem) return sendProblem(reply, error.problem);
    if (error instanceof CatalogBusyError) {
      reply.header('retry-after', '1');
      return sendProblem(reply, problem(503, ProblemCode.Overloaded, error.message));
    }
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      return sendProblem(
        reply,
        problem(413, ProblemCode.BodyTooLarge, `the request body exceeds ${bodyLimit} bytes; send fewer items per request`),
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
}

/**
 * Requests per token per window, counted after the auth hook (the plugin hooks each route, and route
 * hooks run after the app's): a token's burst never slows another token's producers down. Requests
 * without a live token count against their source address, with the same allowance (`setUnauthorized`).
 */
function useRateLimit(
  app: FastifyInstance,
  limit: RateLimit | false,
  notFound: (request: FastifyRequest, reply: FastifyReply) => unknown,
  setUnauthorized: (limit: UnauthorizedLimit) => void,
): void {
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
      setUnauthorized({
        refused: async (request) => {
          const verdict = await check(request);
          return verdict.isAllowed || !verdict.isExceeded ? undefined : { retryAfterS: Math.max(1, verdict.ttlInSeconds) };
        },
      });
    });
  }
}
