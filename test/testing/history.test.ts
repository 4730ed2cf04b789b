import { describe, expect, it } from 'vitest';
import { checkHistory, type Publication, type RunHistory } from '../../src/testing/index.js';

/** The testing kit's checker on its own: each anomaly from a history that has it, and none from a clean one. */
const event = (partitionKey: string, extra: unknown = { rows: 1 }, asset = 'batch_ready'): Publication => ({ asset, partitionKey, partitionDate: null, extra });
const history = (events: Publication[], more: Partial<RunHistory> = {}): RunHistory => ({
  events,
  checkpoints: { backlog: { batch: 3 } },
  data: new Map([['batch-1.json', 'a']]),
  refused: [],
  ...more,
});
const clean = history([event('batch-1'), event('batch-2'), event('batch-3'), { asset: 'oncebox.run_succeeded', partitionKey: null, partitionDate: null, extra: { attempt: 1 } }]);
const kinds = (actual: RunHistory) => checkHistory(clean, actual).map((anomaly) => `${anomaly.kind} ${anomaly.partitionKey}`);

describe('the history checker', () => {
  it('finds nothing in a history equal to a clean run’s, whichever attempt ended the run', () => {
    const retried = history([...clean.events.slice(0, 3), { asset: 'oncebox.run_succeeded', partitionKey: null, partitionDate: null, extra: { attempt: 3 } }]);
    expect(checkHistory(clean, retried)).toEqual([]);
  });

  it('tells lost events from a checkpoint committed ahead of its event', () => {
    expect(kinds(history([event('batch-1'), event('batch-3'), clean.events[3]!], { checkpoints: { backlog: { batch: 2 } } }))).toEqual(['lost batch-2']);
    expect(kinds(history([event('batch-1'), event('batch-3'), clean.events[3]!]))).toEqual(['checkpoint-ahead batch-2']);
  });

  it('finds duplicated, unexpected, changed and reordered events', () => {
    expect(kinds(history([event('batch-1'), event('batch-2'), event('batch-2'), event('batch-3'), clean.events[3]!]))).toEqual(['duplicated batch-2']);
    expect(kinds(history([event('batch-1'), event('batch-2'), event('batch-3'), event('batch-3-at-1733'), clean.events[3]!]))).toEqual(['unexpected batch-3-at-1733']);
    expect(kinds(history([event('batch-1'), event('batch-2', { rows: 2 }), event('batch-3'), clean.events[3]!]))).toEqual(['changed batch-2']);
    expect(kinds(history([event('batch-2'), event('batch-1'), event('batch-3'), clean.events[3]!]))).toEqual(['reordered batch-2']);
  });

  it('compares the order within each task of a run, never across two tasks, which have no order between them', () => {
    const of = (task: string, partitionKey: string): Publication => ({ ...event(partitionKey), task });
    const twoTasks = history([of('a', 'a-1'), of('b', 'b-1'), of('a', 'a-2'), of('b', 'b-2')]);
    // The same job's tasks, run at once on one file, interleaved otherwise: nothing to report.
    expect(checkHistory(twoTasks, history([of('b', 'b-1'), of('b', 'b-2'), of('a', 'a-1'), of('a', 'a-2')]))).toEqual([]);
    // Within a task, the order is the commit order.
    const swapped = checkHistory(twoTasks, history([of('a', 'a-2'), of('b', 'b-1'), of('a', 'a-1'), of('b', 'b-2')]));
    expect(swapped.map((anomaly) => `${anomaly.kind} ${anomaly.partitionKey}`)).toEqual(['reordered a-2']);
    expect(swapped[0]!.detail).toContain('of task a');
  });

  it('reports a refusal, as a changed payload when the server saw the key with another one', () => {
    const refused = [
      { asset: 'batch_ready', partitionKey: 'batch-2', code: 'key_conflict', reason: 'another payload' },
      { asset: 'batch_ready', partitionKey: 'batch-9', code: 'unknown_asset', reason: 'not registered' },
    ];
    const anomalies = checkHistory(clean, history([event('batch-1'), event('batch-3'), clean.events[3]!], { refused, checkpoints: { backlog: { batch: 2 } } }));
    expect(anomalies.map((anomaly) => `${anomaly.kind} ${anomaly.partitionKey}`)).toEqual(['changed batch-2', 'refused batch-9']);
  });

  it('finds a data store that differs from a clean run’s', () => {
    expect(kinds(history(clean.events, { data: new Map([['batch-1.json', 'b'], ['extra.log', 'c']]) }))).toEqual(['data-differs batch-1.json', 'data-differs extra.log']);
  });

  it('compares each of several events of one identity with the clean run’s, not all with the first', () => {
    const unpartitioned = (extra: unknown): Publication => ({ asset: 'audit', partitionKey: null, partitionDate: null, extra });
    const twice = history([...clean.events.slice(0, 3), unpartitioned({ step: 'start' }), unpartitioned({ step: 'end' }), clean.events[3]!]);
    expect(checkHistory(twice, twice)).toEqual([]);
    expect(checkHistory(twice, history([...clean.events.slice(0, 3), unpartitioned({ step: 'start' }), unpartitioned({ step: 'middle' }), clean.events[3]!])).map((a) => a.kind)).toEqual(['changed']);
  });

  it('pairs a lost event with an unexpected one of the same asset: a partition key that changed on the re-run', () => {
    // The run's checkpoint says it is done: still `lost`, not `checkpoint-ahead`, since an event of the
    // asset stands in for the missing one.
    const anomalies = checkHistory(clean, history([event('batch-1'), event('batch-2-attempt-2'), event('batch-3'), clean.events[3]!]));
    expect(anomalies.map((anomaly) => `${anomaly.kind} ${anomaly.partitionKey}`)).toEqual(['lost batch-2', 'unexpected batch-2-attempt-2']);
    expect(anomalies[0]!.detail).toContain('published as batch-2-attempt-2 instead?');
    expect(anomalies[1]!.detail).toContain('meant as batch-2?');
  });
});
