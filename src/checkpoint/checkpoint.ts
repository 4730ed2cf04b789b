import type { z } from 'zod';
import { canonicalJson, NonJsonValue } from '../protocol/canonical-json.js';
import { describeFirstIssue } from '../protocol/emission.js';
import { CheckpointValidationError } from '../protocol/errors.js';

/** @internal Where a checkpoint reads its last committed value from. */
export interface CheckpointSource {
  read(name: string): string | undefined;
}

/**
 * What to do when a job's new code reads a checkpoint its old code wrote in another shape. The value is
 * the job's progress, so it is never dropped for the user: they say how the old shape maps to the new.
 */
const SCHEMA_CHANGED_FIX =
  'the schema no longer matches what an earlier version committed; give box.checkpoint() a schema that also reads the old value and converts it, ' +
  "z.union([newSchema, oldSchema.transform(toNew)]), or start afresh under a new checkpoint name (docs/operations.md, \"When a checkpoint's schema changes\")";

/**
 * A named, typed piece of progress state, such as `{ batch: 41 }`. It is written only inside
 * `commit()`, together with the emissions it accounts for, and validated by its schema both when it is
 * written and when it is read back.
 */
export class Checkpoint<T> {
  /** @internal */
  constructor(
    readonly name: string,
    readonly schema: z.ZodType<T>,
    private readonly source: CheckpointSource,
  ) {}

  /** The last committed value, or undefined before the first commit that set it. */
  get(): T | undefined {
    const stored = this.source.read(this.name);
    if (stored === undefined) return undefined;
    return this.check(JSON.parse(stored), 'stored value', SCHEMA_CHANGED_FIX);
  }

  /** @internal Validates a value about to be written and returns it as canonical JSON. */
  encode(value: T): string {
    const parsed = this.check(value, 'value', 'pass a value that matches the schema given to box.checkpoint()');
    try {
      return canonicalJson(parsed, 'value');
    } catch (error) {
      if (!(error instanceof NonJsonValue)) throw error;
      throw new CheckpointValidationError(this.name, error.path, `checkpoint "${this.name}": ${error.path} ${error.problem}`);
    }
  }

  private check(value: unknown, what: string, fix: string): T {
    const parsed = this.schema.safeParse(value);
    if (parsed.success) return parsed.data;
    const { field, message } = describeFirstIssue(parsed.error, { input: value, prefix: what });
    throw new CheckpointValidationError(this.name, field, `checkpoint "${this.name}": ${message}; ${fix}`);
  }
}
