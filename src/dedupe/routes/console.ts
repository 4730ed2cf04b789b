import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';
import { ProblemCode } from '../../protocol/errors.js';
import { problem, sendProblem } from '../problem.js';

/**
 * Where the built console is: beside the compiled server in the package (dist/console), or, when the
 * server runs from its sources (tsx), in the checkout's dist/console that `npm run build` wrote.
 */
export function consoleDirectory(): string | undefined {
  const candidates = [new URL('../../console/', import.meta.url), new URL('../../../dist/console/', import.meta.url)];
  return candidates.map((url) => fileURLToPath(url)).find((dir) => existsSync(`${dir}index.html`));
}

/**
 * What the browser may do on the console's pages: load its own scripts and styles, and talk to this
 * server only. Its data requests carry the token in a header, never in a URL, so no third party (a
 * proxy's log, a referrer) ever sees it.
 */
const CONSOLE_HEADERS = {
  'content-security-policy': "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

/**
 * The web console at /console/: its HTML, scripts and styles are public (they hold no data); every data
 * request it makes carries the read token its user entered. `GET /` leads there.
 */
export function addConsoleRoutes(app: FastifyInstance, directory = consoleDirectory()): void {
  // Relative redirects: behind a proxy that serves this server under a path of its own, they stay under it.
  app.get('/', { config: { access: 'public' } }, async (_request, reply) => reply.redirect('console/'));
  app.get('/console', { config: { access: 'public' } }, async (_request, reply) => reply.redirect('console/'));
  if (directory === undefined) {
    // A checkout that never built it: the API works, and the console says how to get it.
    app.get('/console/*', { config: { access: 'public' } }, async (_request, reply) =>
      sendProblem(reply, problem(404, ProblemCode.NotFound, 'the console is not built in this checkout: run npm run build (an installed package has it built)')),
    );
    return;
  }
  void app.register(fastifyStatic, { root: directory, serve: false, decorateReply: true });
  app.get<{ Params: { '*': string } }>('/console/*', { config: { access: 'public' } }, async (request, reply) => {
    const file = request.params['*'] === '' ? 'index.html' : request.params['*'];
    reply.headers(CONSOLE_HEADERS);
    // Built assets carry their content hash in their names: cached for good. The page itself is not.
    if (file.startsWith('assets/')) return reply.sendFile(file, { maxAge: '365d', immutable: true });
    reply.header('cache-control', 'no-cache');
    return reply.sendFile(file, { cacheControl: false });
  });
}
