import { describeFirstIssue } from '../protocol/emission.js';
import { isLifecycleAsset, lifecycleExtraSchemas, outcomeKey } from '../protocol/lifecycle.js';
import type { StreamIdentity } from '../protocol/wire.js';
import { subjectOf, type CheckedItem, type InvalidItem } from './item-check.js';

/**
 * A lifecycle event (`oncebox.run_*`) is checked like any event, and more: a token that may publish as
 * a producer may publish them without listing them, so each must say exactly what its terminal commit
 * would, about its own stream's run. The run it names is the stream's. The attempt it is about is the
 * stream's own or an earlier one: a same-machine retry takes over its predecessors' undelivered rows and
 * delivers them as its own (G12), so attempt 2 may deliver attempt 1's failure, and attempt 3 the fence of
 * 1 by 2, each keeping the attempts it was committed with. Never a later one: the server fences every
 * attempt below the newest to deliver, so a zombie (an older attempt) can only speak of attempts older
 * than itself, never forge a failure or a fence of the live one. And its key is the one the producer
 * derives for that outcome and attempt. Anything else is refused on its own, as invalid, so that no
 * notifier acts on a made-up outcome.
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
  if (extra.outcome === 'failed' && extra.attempt > stream.attempt) {
    return refuse('extra.attempt', `extra.attempt: a failure is of the stream's own attempt (${stream.attempt}) or an earlier one it took over`);
  }
  if (extra.outcome === 'fenced' && extra.attempt >= extra.fencedBy) {
    return refuse('extra.fencedBy', `extra.fencedBy: a fence is by a later attempt than the one it fences (extra.attempt ${extra.attempt})`);
  }
  if (extra.outcome === 'fenced' && extra.fencedBy > stream.attempt) {
    return refuse('extra.fencedBy', `extra.fencedBy: a fence is by the stream's own attempt (${stream.attempt}) or an earlier one it took over`);
  }
  // The key of its outcome and attempt, as the producer derives it: under another outcome's key (a later
  // attempt's failure, the run's success), a valid-looking event would hold that key for good, and the
  // real one would conflict with it.
  if (item.key !== outcomeKey(stream.producer, extra, extra.outcome, extra.outcome === 'succeeded' ? 0 : extra.attempt)) {
    return refuse('key', `key: a lifecycle event's key is the one its producer, run, outcome and attempt derive (see docs/protocol.md)`);
  }
  return item;
}
