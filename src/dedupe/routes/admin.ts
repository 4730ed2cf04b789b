import type { FastifyInstance } from 'fastify';
import { assetNameSchema } from '../../protocol/emission.js';
import { ProblemCode } from '../../protocol/errors.js';
import { echo } from '../../protocol/text.js';
import type { HttpAppOptions } from '../http-options.js';
import { invalidInput, problem, sendProblem } from '../problem.js';
import { describeGrant, tokenRequestSchema } from '../tokens.js';

/** The id part of a token, as `oncebox token list` shows it. */
const TOKEN_ID = /^[0-9a-f]{16}$/;

/** The admin routes: registering assets, and creating, listing and revoking tokens. */
export function addAdminRoutes(app: FastifyInstance, options: HttpAppOptions): void {
  const { store } = options;
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
