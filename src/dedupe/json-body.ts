import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ProblemCode } from '../protocol/errors.js';
import { echo } from '../protocol/text.js';
import { problem, RequestProblem } from './problem.js';

/**
 * Where an item of `POST /v1/emissions` held a `__proto__` key: the parser puts this in the item's place
 * (with its seq and key), so that the item check refuses that one item and the batch goes on.
 * @internal
 */
export const RESERVED_KEY_PATH = Symbol('oncebox.reservedKeyPath');

/** The route whose items are answered one by one; a reserved key elsewhere refuses the request. */
const ITEMIZED_ROUTE = '/v1/emissions';

/**
 * A `"__proto__":` key in JSON text, in any mix of plain and `\u` escaped letters. Only when the text
 * matches is the parsed body walked for the key, so an ordinary body costs one scan of a regular
 * expression.
 */
const PROTO_KEY_TEXT =
  /"(?:_|\\u005[Ff])(?:_|\\u005[Ff])(?:p|\\u0070)(?:r|\\u0072)(?:o|\\u006[Ff])(?:t|\\u0074)(?:o|\\u006[Ff])(?:_|\\u005[Ff])(?:_|\\u005[Ff])"\s*:/;

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The JSON body parser. Before parsing, each check linear in the body's size: the body is UTF-8, by its
 * charset and its bytes (a body sent as UTF-16 or Latin-1 would otherwise be misread, its bad bytes
 * turned into U+FFFD and stored), and it nests no deeper than `maxDepth` (a deeply nested body would cost
 * the parser seconds). A `__proto__` key is never let through to the code that reads the body (copying
 * such an object by assignment would change its prototype): in an item of a batch it refuses that item
 * (see RESERVED_KEY_PATH), anywhere else the request.
 * @internal
 */
export function useJsonBodyParser(app: FastifyInstance, maxDepth: number): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    try {
      done(null, parseBody(request, body as Buffer, maxDepth));
    } catch (error) {
      done(error as Error);
    }
  });
}

function parseBody(request: FastifyRequest, bytes: Buffer, maxDepth: number): unknown {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(request.headers['content-type'] ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    throw new RequestProblem(problem(415, ProblemCode.UnsupportedMediaType, 'send the body as UTF-8 JSON (charset=utf-8, or no charset)'));
  }
  // An empty body is no body, whatever its type says: a route whose body is optional (an attempt claim)
  // takes it, one that needs a body says so.
  if (bytes.length === 0) return undefined;
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new RequestProblem(problem(400, ProblemCode.MalformedJson, 'the body is not valid UTF-8; send JSON encoded as UTF-8'));
  }
  if (nestingDepth(text, maxDepth) > maxDepth) {
    throw new RequestProblem(problem(400, ProblemCode.MalformedJson, `the body nests deeper than ${maxDepth} levels; flatten it`));
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new RequestProblem(problem(400, ProblemCode.MalformedJson, `the body is not valid JSON: ${echo((error as Error).message)}`));
  }
  if (!PROTO_KEY_TEXT.test(text)) return body;
  const itemized = request.routeOptions.url === ITEMIZED_ROUTE && isObject(body) && Array.isArray(body.items);
  if (itemized) {
    const items = (body as { items: unknown[] }).items;
    for (let index = 0; index < items.length; index++) {
      const path = reservedKeyPath(items[index], `items[${index}]`);
      if (path !== undefined) items[index] = refusedItem(items[index] as Record<string, unknown>, path);
    }
  }
  const path = reservedKeyPath(body, 'body');
  if (path !== undefined) {
    throw new RequestProblem(problem(400, ProblemCode.InvalidRequest, `${echo(path)}: a key named __proto__ is refused (it could change an object's prototype); rename it`));
  }
  return body;
}

/** What stands in for an item with a `__proto__` key: its position, if it has one, and where the key is. */
function refusedItem(item: Record<string, unknown>, path: string): Record<string | symbol, unknown> {
  return { seq: item.seq, key: item.key, [RESERVED_KEY_PATH]: path };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The path of the first `__proto__` key in a parsed JSON value (JSON.parse makes it an own property). */
function reservedKeyPath(value: unknown, path: string): string | undefined {
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = reservedKeyPath(value[index], `${path}[${index}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (!isObject(value)) return undefined;
  if (Object.hasOwn(value, '__proto__')) return `${path}.__proto__`;
  for (const key of Object.keys(value)) {
    // Each key cut by echo(), as every path an answer names: a refusal never repeats a huge key whole.
    const found = reservedKeyPath(value[key], `${path}.${echo(key)}`);
    if (found !== undefined) return found;
  }
  return undefined;
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
