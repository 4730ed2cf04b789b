import type { ZodError } from 'zod';
import { describeFirstIssue } from '../protocol/emission.js';
import type { FastifyReply } from 'fastify';
import { ProblemCode } from '../protocol/errors.js';
import { PROBLEM_CONTENT_TYPE, type Problem } from '../protocol/wire.js';

const TITLES: Record<string, string> = {
  [ProblemCode.MalformedJson]: 'Malformed JSON',
  [ProblemCode.InvalidRequest]: 'Invalid request',
  [ProblemCode.UnsupportedMediaType]: 'Unsupported media type',
  [ProblemCode.BodyTooLarge]: 'Request body too large',
  [ProblemCode.BatchTooLarge]: 'Batch too large',
  [ProblemCode.Unauthorized]: 'Unauthorized',
  [ProblemCode.Forbidden]: 'Forbidden',
  [ProblemCode.RateLimited]: 'Too many requests',
  [ProblemCode.NotFound]: 'Not found',
  [ProblemCode.MethodNotAllowed]: 'Method not allowed',
  [ProblemCode.AttemptTaken]: 'Attempt taken',
  [ProblemCode.AttemptTooHigh]: 'Attempt too high',
  [ProblemCode.RequestTimeout]: 'Request timeout',
  [ProblemCode.ExpectationFailed]: 'Expectation failed',
  [ProblemCode.Overloaded]: 'Overloaded',
  [ProblemCode.ShuttingDown]: 'Shutting down',
  [ProblemCode.Internal]: 'Internal server error',
};

/** An RFC 9457 problem document; `type` is a stable URI per code, documented in docs/protocol.md. */
export function problem(status: number, code: string, detail: string, field?: string): Problem {
  return {
    type: `https://oncebox.dev/problems/${code}`,
    title: TITLES[code] ?? code,
    status,
    detail,
    code,
    ...(field === undefined ? {} : { field }),
  };
}

export function sendProblem(reply: FastifyReply, body: Problem): FastifyReply {
  return reply.status(body.status).type(PROBLEM_CONTENT_TYPE).send(body);
}

/** A request refused outside a route handler (a body parser, a hook, a plugin), with the problem to answer. */
export class RequestProblem extends Error {
  constructor(readonly problem: Problem) {
    super(problem.detail);
  }
}

/** The 400 answer to input a schema refused: its first issue, with the field it names (or `field`). */
export function invalidInput(error: ZodError, described: Parameters<typeof describeFirstIssue>[1], field?: string): Problem {
  const issue = describeFirstIssue(error, described);
  return problem(400, ProblemCode.InvalidRequest, issue.message, field ?? issue.field);
}
