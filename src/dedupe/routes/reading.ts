import type { FastifyInstance } from 'fastify';
import { ProblemCode } from '../../protocol/errors.js';
import { echo, nameList } from '../../protocol/text.js';
import { eventQuerySchema, streamParamsSchema, streamQuerySchema, type TokenScopeAnswer } from '../../protocol/wire.js';
import { forbidden } from '../auth.js';
import { boundedPage, waitedPage } from '../event-page.js';
import type { HttpAppOptions } from '../http-options.js';
import type { LongPolls } from '../long-polls.js';
import { FetchNotes } from '../catalog/fetch-notes.js';
import { invalidInput, problem, sendProblem } from '../problem.js';
import { malformedQueryNumber } from '../query-numbers.js';
import { producerAllowed, readableAssets } from '../tokens.js';

/** The routes that read what the server stored: events (paged, or waited for), a stream's state, the assets. */
export function addReadingRoutes(app: FastifyInstance, options: HttpAppOptions, longPolls: LongPolls): void {
  const { store } = options;
  const fetchNotes = new FetchNotes(store.catalog, store.catalog.now);
  app.get('/v1/events', { config: { access: 'events' } }, async (request, reply) => {
    const malformed = malformedQueryNumber(request.query, { whole: ['after', 'limit'], decimal: ['wait'] });
    if (malformed) return sendProblem(reply, problem(400, ProblemCode.InvalidRequest, malformed.message, malformed.field));
    const parsed = eventQuerySchema.safeParse(request.query);
    if (!parsed.success) {
      return sendProblem(reply, invalidInput(parsed.error, { input: request.query, knownKeys: ['asset', 'after', 'limit', 'wait', 'group', 'groupProducer'] }));
    }
    const { asset, group, groupProducer, ...read } = parsed.data;
    // Only the group's own consumer notes its fetch: a token that may publish as the group's producer (or
    // admin). A read token reads, and changes no group's state, whatever group it names.
    const mayActAsGroup = request.grant.scope === 'admin' || (request.grant.scope === 'publish' && producerAllowed(request.grant, groupProducer ?? group ?? ''));
    if (group !== undefined && mayActAsGroup) await fetchNotes.note(groupProducer ?? group, group);
    const readable = readableAssets(request.grant);
    if (readable !== null && asset !== undefined && !readable.includes(asset)) {
      return sendProblem(reply, forbidden(`asset: this token reads only the events of ${nameList(readable)}`, 'asset'));
    }
    const { wait, ...asked } = { ...read, asset };
    // A token limited to some assets that names none reads the events of those, in cursor order.
    const query = readable !== null && asset === undefined ? { ...asked, assets: readable } : asked;
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
      // A run's stream is one per task: a reader that left out ?task= (or gave another) is told which exist.
      const tasks = (await store.tasksOfRun(producer, runId, 8)).filter((other) => other !== (parsed.data.task ?? null));
      const hint = tasks.length === 0 ? '' : `; this run has delivered as ${tasks.map((other) => (other === null ? 'no task (leave out ?task=)' : `?task=${echo(other)}`)).join(', ')}`;
      return sendProblem(reply, problem(404, ProblemCode.NotFound, `no stream ${echo(producer)}/${echo(runId)}${task} has delivered to this server${hint}`));
    }
    return state;
  });

  // Any valid token may ask what it may do itself: a job checks at open that its token can publish.
  app.get('/v1/token', { config: { access: 'any' } }, async (request): Promise<TokenScopeAnswer> => {
    const { scope, producers, assets, consumes, reads } = request.grant;
    return { scope, producers, assets, consumes, reads };
  });

  // A token limited to assets sees only those: the list is no more public than the events.
  app.get('/v1/assets', { config: { access: 'events' } }, async (request) => ({
    assets: (await store.listAssets()).filter((asset) => readableAssets(request.grant)?.includes(asset) ?? true),
  }));
}
