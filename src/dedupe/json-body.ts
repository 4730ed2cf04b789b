import type { FastifyInstance } from 'fastify';
import { ProblemCode } from '../protocol/errors.js';
import { problem, RequestProblem } from './problem.js';

/**
 * The JSON body parser, with two checks before any parsing, each linear in the body's size: the body is
 * UTF-8 (a body sent as UTF-16 would be read as UTF-8 and misread), and it nests no deeper than
 * `maxDepth` (a deeply nested body would cost the parser seconds). Then the framework's own parser,
 * which refuses `__proto__` keys.
 * @internal
 */
export function useJsonBodyParser(app: FastifyInstance, maxDepth: number): void {
  const parse = app.getDefaultJsonParser('error', 'ignore');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(request.headers['content-type'] ?? '')?.[1]?.toLowerCase();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      done(new RequestProblem(problem(415, ProblemCode.UnsupportedMediaType, 'send the body as UTF-8 JSON (charset=utf-8, or no charset)')));
      return;
    }
    const text = body as string;
    if (nestingDepth(text, maxDepth) > maxDepth) {
      done(new RequestProblem(problem(400, ProblemCode.MalformedJson, `the body nests deeper than ${maxDepth} levels; flatten it`)));
      return;
    }
    parse(request, text, done);
  });
}

const OPEN_BRACKET = 0x5b;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACKET = 0x5d;
const CLOSE_BRACE = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * How deep arrays and objects nest in JSON text, counted outside strings; it stops counting once past
 * `stopAbove`. Malformed text gets some number: the parser refuses it afterwards anyway.
 */
export function nestingDepth(text: string, stopAbove: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      depth++;
      if (depth > deepest) {
        deepest = depth;
        if (deepest > stopAbove) return deepest;
      }
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) depth--;
  }
  return deepest;
}
