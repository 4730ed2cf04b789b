import { z } from 'zod';
import { describeFirstIssue } from '../protocol/emission.js';
import { LifecycleAsset, isLifecycleAsset } from '../protocol/lifecycle.js';
import { nameSchema, type StreamIdentity } from '../protocol/wire.js';
import { subjectOf, type CheckedItem, type InvalidItem } from './item-check.js';

const run = { workflow: nameSchema, runId: nameSchema, task: nameSchema.nullable() };
const attempt = z.number().int().min(1);

/** The extra of each lifecycle event, exactly as a terminal commit writes it (src/outbox/commit/commit.ts). */
const lifecycleExtraSchemas = {
  [LifecycleAsset.Succeeded]: z.strictObject({ outcome: z.literal('succeeded'), ...run }),
  [LifecycleAsset.Failed]: z.strictObject({
    outcome: z.literal('failed'),
    ...run,
    attempt,
    error: z.strictObject({ message: z.string().max(1000), code: z.string().max(200).optional() }),
    willRetry: z.boolean(),
    held: z.number().int().min(0),
  }),
  [LifecycleAsset.Fenced]: z.strictObject({ outcome: z.literal('fenced'), ...run, attempt, fencedBy: attempt }),
};

/**
 * A lifecycle event (`oncebox.run_*`) is checked like any event, and more: a token that may publish as
 * a producer may publish them without listing them, so each must say exactly what its terminal commit
 * would, about its own stream: the run it names is the stream's, a failure is the stream's attempt, and
 * a fence is of an earlier attempt by the stream's. Anything else is refused on its own, as invalid, so
 * that no notifier acts on a made-up outcome of another run.
 */
export function checkLifecycleEvent(item: CheckedItem | InvalidItem, stream: StreamIdentity): CheckedItem | InvalidItem {
  if (item.kind !== 'event' || !isLifecycleAsset(item.payload.asset)) return item;
  const { asset } = item.payload;
  const refuse = (field: string, detail: string): InvalidItem => ({ valid: false, seq: item.seq, key: item.key, field, detail, subject: subjectOf(item)! });
  if (item.payload.partitionKey !== undefined || item.payload.partitionDate !== undefined) {
    return refuse('partitionKey', `partitionKey: a lifecycle event (${asset}) has no partition; it names its run in extra`);
  }
  // The payload's extra is canonical JSON text by now.
  const extraValue: unknown = item.payload.extra === undefined ? {} : JSON.parse(item.payload.extra);
  const parsed = lifecycleExtraSchemas[asset].safeParse(extraValue);
  if (!parsed.success) {
    const { field, message } = describeFirstIssue(parsed.error, { input: extraValue, prefix: 'extra' });
    return refuse(field, `${message} (a lifecycle event's extra is what a terminal commit writes; see docs/runners.md)`);
  }
  const extra = parsed.data;
  if (extra.workflow !== stream.workflow || extra.runId !== stream.runId || extra.task !== stream.task) {
    return refuse('extra', `extra: a lifecycle event names the run of its own stream (workflow, runId and task of stream), not another`);
  }
  if (extra.outcome === 'failed' && extra.attempt !== stream.attempt) {
    return refuse('extra.attempt', `extra.attempt: a failure is of the stream's own attempt (${stream.attempt})`);
  }
  if (extra.outcome === 'fenced' && (extra.fencedBy !== stream.attempt || extra.attempt >= extra.fencedBy)) {
    return refuse('extra.fencedBy', `extra.fencedBy: a fence is of an earlier attempt by the stream's own (${stream.attempt})`);
  }
  return item;
}
