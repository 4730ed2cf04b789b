import type { FastifyInstance } from 'fastify';
import { ProblemCode } from '../../protocol/errors.js';
import { isLifecycleAsset } from '../../protocol/lifecycle.js';
import { echo, nameList } from '../../protocol/text.js';
import { emissionBatchSchema, exactAttemptClaimSchema, nextAttemptClaimSchema, streamParamsSchema, type ClaimedAttempt, type EmissionBatchResponse, type StreamIdentity } from '../../protocol/wire.js';
import { forbidden } from '../auth.js';
import type { HttpAppOptions } from '../http-options.js';
import { checkItem, refuseOutOfScope } from '../item-check.js';
import { checkLifecycleEvent } from '../lifecycle-check.js';
import type { NewStreamLimiter } from '../new-streams.js';
import { invalidInput, problem, sendProblem } from '../problem.js';
import { assetAllowed, causeAllowed, producerAllowed, type TokenGrant } from '../tokens.js';
import { tracedIngest } from '../tracing.js';
import { parseRunKeys, RUN_KEYS_HEADER } from '../../protocol/run-keys.js';

/**
 * Each item checked on its own, within the token's assets (lifecycle events need no place in its list:
 * they are checked to be about this stream instead), and marked when the run-keys header lists it.
 */
function checkBatch(items: readonly unknown[], stream: StreamIdentity, grant: TokenGrant, runKeys: ReadonlySet<number>) {
  const allowed = nameList(grant.assets ?? []);
  return items.map((item, index) => {
    const result = refuseOutOfScope(checkLifecycleEvent(checkItem(item, index), stream), (asset) => isLifecycleAsset(asset) || assetAllowed(grant, asset), allowed);
    return result.kind === 'event' && runKeys.has(index) ? { ...result, keyOfRun: true as const } : result;
  });
}

/** The items the run-keys header lists; none without it (a relay from before it). */
function runKeysOf(header: string | string[] | undefined, itemCount: number): ReturnType<typeof parseRunKeys> {
  if (header === undefined) return { positions: new Set() };
  return parseRunKeys(Array.isArray(header) ? header.join(',') : header, itemCount);
}

/** The routes that write a producer's streams: publishing a batch, and claiming an attempt. */
export function addPublishingRoutes(app: FastifyInstance, options: HttpAppOptions, newStreams: NewStreamLimiter): void {
  const { store } = options;
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
    const runKeys = runKeysOf(request.headers[RUN_KEYS_HEADER], items.length);
    if ('problem' in runKeys) {
      return sendProblem(reply, problem(400, ProblemCode.InvalidRequest, `${RUN_KEYS_HEADER} header: ${runKeys.problem}`, RUN_KEYS_HEADER));
    }
    const checked = checkBatch(items, stream, grant, runKeys.positions);
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
}
