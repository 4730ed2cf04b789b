import { z } from 'zod';
import { ProblemCode } from '../../protocol/errors.js';
import { isPlainText } from '../../protocol/text.js';
import { problem, RequestProblem } from '../problem.js';

/**
 * A catalog page's `next`: where the page ended (the sort key of its last row), opaque to clients. It is
 * the key itself, not an offset, so a page goes on from the same place however many rows arrived since.
 */
export function encodePageCursor(key: readonly (string | number)[]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

/** The key a client's `after` holds, of the shape `shape`; a 400 naming `after` for anything else. */
export function decodePageCursor<Shape extends z.ZodType>(after: string | undefined, shape: Shape): z.output<Shape> | undefined {
  if (after === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(after, 'base64url').toString('utf8'));
  } catch {
    parsed = undefined;
  }
  const key = shape.safeParse(parsed);
  // Forged keys go into SQL as parameters: text a store cannot hold, or a number past exact integers,
  // would fail there (PostgreSQL refuses NUL) instead of here.
  if (!key.success || !(key.data as unknown[]).every(isStorable)) {
    throw new RequestProblem(
      problem(400, ProblemCode.InvalidRequest, 'after: not a page cursor of this list; pass back the `next` of the previous page as it came, or leave after out for the first page', 'after'),
    );
  }
  return key.data;
}

function isStorable(part: unknown): boolean {
  return typeof part === 'string' ? isPlainText(part) : Number.isSafeInteger(part);
}

/** The usual page key: one name. */
export const nameKey = z.tuple([z.string()]);
