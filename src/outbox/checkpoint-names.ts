import { describeFirstIssue } from '../protocol/emission.js';
import { OptionsError } from '../protocol/errors.js';
import { Limits } from '../protocol/limits.js';
import { nameSchema } from '../protocol/wire.js';

/**
 * The checkpoint names a job defines, each checked once when `box.checkpoint()` is called: a valid name,
 * within the number of names the server keeps per run, and given with a schema.
 */
export class CheckpointNames {
  private readonly names = new Set<string>();

  /** Checks a checkpoint's name and schema; returns the name, or throws OptionsError naming the fix. */
  admit(name: string, schema: unknown): string {
    const parsed = nameSchema.safeParse(name);
    if (!parsed.success) {
      const { message } = describeFirstIssue(parsed.error, { input: name, prefix: 'checkpoint name' });
      throw new OptionsError('name', message);
    }
    // One name is the producer's own (the held emissions' mirror, oncebox.held).
    if (!this.names.has(parsed.data) && this.names.size >= Limits.maxCheckpointNames - 1) {
      throw new OptionsError(
        'name',
        `checkpoint name: a run keeps at most ${Limits.maxCheckpointNames - 1} checkpoints, and this job defined them all; keep several values in one checkpoint (an object) rather than a checkpoint each`,
      );
    }
    if (typeof (schema as { safeParse?: unknown } | undefined)?.safeParse !== 'function') {
      // Plain JavaScript gets no type error for a missing schema; it gets this instead of a TypeError later.
      throw new OptionsError(
        'schema',
        `box.checkpoint('${parsed.data}', schema): the second argument must be a zod schema of the checkpoint's value, such as z.object({ batch: z.number().int() }) (import { z } from 'zod'; npm install zod)`,
      );
    }
    this.names.add(parsed.data);
    return parsed.data;
  }
}
