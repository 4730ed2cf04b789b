import type { z } from 'zod';
import { describeFirstIssue } from './emission.js';
import { OptionsError } from './errors.js';

/**
 * Validates an option bag once, into its resolved type. A misspelt or unknown option is an error that
 * names it, rather than a setting silently ignored.
 * @internal
 */
export function resolveOptions<Schema extends z.ZodObject>(schema: Schema, input: unknown, where: string): z.output<Schema> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  const problem = describeFirstIssue(parsed.error, { input, knownKeys: (path) => knownKeysAt(schema, path) });
  throw new OptionsError(problem.field, `${where}: ${problem.message}`);
}

/** The field names of the object schema at `path` inside `schema`, looking through optional and default wrappers. */
function knownKeysAt(schema: z.ZodType, path: readonly PropertyKey[]): readonly string[] | undefined {
  let current: unknown = schema;
  for (let i = 0; i <= path.length; i++) {
    while (current && !(current instanceof Object && 'shape' in current)) {
      const inner = (current as { def?: { innerType?: unknown } }).def?.innerType;
      if (inner === undefined) return undefined;
      current = inner;
    }
    const shape = (current as { shape?: Record<string, unknown> } | undefined)?.shape;
    if (!shape) return undefined;
    if (i === path.length) return Object.keys(shape);
    current = shape[String(path[i])];
  }
  return undefined;
}
