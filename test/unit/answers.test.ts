import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { afterAnswers, applyAnswers, type AppliedAnswers } from '../../src/outbox/relay/answers.js';
import { FencedError, StreamStateLostError } from '../../src/outbox/index.js';
import { OutboxFile } from '../../src/outbox/file/outbox-file.js';
import type { OutboxRow } from '../../src/outbox/file/schema.js';
import { DeliveryError } from '../../src/client/server-client.js';
import type { ItemResult } from '../../src/protocol/wire.js';
import { tempDir } from '../support/temp.js';

/** The relay's handling of the server's answers (src/outbox/relay/answers.ts), on a real outbox file. */
const files: OutboxFile[] = [];
afterEach(() => {
  for (const file of files.splice(0)) file.close();
});

const NOW = 1_700_000_000_000;
const STREAM = { producer: 'p', workflow: 'w', runId: 'r1', task: 'ingest', attempt: 1 };

function fileWithRows(count: number, attempt = 1): { file: OutboxFile; rows: OutboxRow[] } {
  const file = new OutboxFile(join(tempDir(), 'outbox.db'), 'normal');
  files.push(file);
  const insert = file.db.prepare(
    `INSERT INTO outbox (key, fingerprint, workflow, run_id, task, attempt, seq, kind, asset, committed_at)
     VALUES (?, 'f', 'w', 'r1', 'ingest', ?, ?, ?, 'batch_ready', 0)`,
  );
  for (let seq = 1; seq <= count; seq++) insert.run(`key-${attempt}-${seq}`, attempt, seq, seq === count ? 'checkpoint' : 'event');
  return { file, rows: file.db.prepare('SELECT * FROM outbox ORDER BY id').all() as OutboxRow[] };
}

const stateOf = (file: OutboxFile) =>
  file.db.prepare('SELECT attempt, seq, state, event_id, event_ts, duplicate, settled_at, dead_code, dead_reason FROM outbox ORDER BY id').all();

describe('applyAnswers', () => {
  it('marks each row with the answer for its key, and reports what a receipt promise needs', () => {
    const { file, rows } = fileWithRows(6);
    const results: ItemResult[] = [
      { status: 'accepted', seq: 1, key: rows[0]!.key, eventId: 'e1', timestamp: 't1' },
      { status: 'duplicate', seq: 2, key: rows[1]!.key, eventId: 'e2', timestamp: 't2' },
      { status: 'rejected', seq: 3, key: rows[2]!.key, code: 'unknown_asset', detail: 'not registered', field: 'asset' },
      { status: 'conflict', seq: 4, key: rows[3]!.key, code: 'key_conflict', detail: 'another payload' },
      { status: 'rejected', seq: null, key: null, code: 'invalid_item', detail: 'unplaced' },
      { status: 'checkpointed', seq: 6, key: rows[5]!.key },
    ];
    const applied = applyAnswers(file, rows, results, NOW);
    expect(applied).toEqual({
      settled: [
        { id: rows[0]!.id, state: 'delivered', key: rows[0]!.key, eventId: 'e1', timestamp: 't1', duplicate: false, committedAt: rows[0]!.committed_at },
        { id: rows[1]!.id, state: 'delivered', key: rows[1]!.key, eventId: 'e2', timestamp: 't2', duplicate: true, committedAt: rows[1]!.committed_at },
        { id: rows[2]!.id, state: 'dead', key: rows[2]!.key, code: 'unknown_asset', reason: 'not registered' },
        { id: rows[3]!.id, state: 'dead', key: rows[3]!.key, code: 'key_conflict', reason: 'another payload' },
      ],
      marked: 5,
      movedAway: 0,
      fence: undefined,
    });
    expect(stateOf(file)).toEqual([
      { attempt: 1, seq: 1, state: 'delivered', event_id: 'e1', event_ts: 't1', duplicate: 0, settled_at: NOW, dead_code: null, dead_reason: null },
      { attempt: 1, seq: 2, state: 'delivered', event_id: 'e2', event_ts: 't2', duplicate: 1, settled_at: NOW, dead_code: null, dead_reason: null },
      { attempt: 1, seq: 3, state: 'dead', event_id: null, event_ts: null, duplicate: null, settled_at: NOW, dead_code: 'unknown_asset', dead_reason: 'not registered' },
      { attempt: 1, seq: 4, state: 'dead', event_id: null, event_ts: null, duplicate: null, settled_at: NOW, dead_code: 'key_conflict', dead_reason: 'another payload' },
      { attempt: 1, seq: 5, state: 'pending', event_id: null, event_ts: null, duplicate: null, settled_at: null, dead_code: null, dead_reason: null },
      { attempt: 1, seq: 6, state: 'delivered', event_id: null, event_ts: null, duplicate: null, settled_at: NOW, dead_code: null, dead_reason: null },
    ]);
  });

  it('marks nothing on a gap', () => {
    const { file, rows } = fileWithRows(2);
    const applied = applyAnswers(file, rows, [
      { status: 'gap', seq: 1, key: rows[0]!.key, expectedSeq: 1 },
      { status: 'gap', seq: 2, key: rows[1]!.key, expectedSeq: 1 },
    ], NOW);
    expect(applied).toEqual({ settled: [], marked: 0, movedAway: 0, fence: undefined });
    expect((stateOf(file) as { state: string }[]).map((row) => row.state)).toEqual(['pending', 'pending']);
  });

  it("records a fence and parks every pending row of the fenced attempt, and only those", () => {
    const { file, rows } = fileWithRows(4);
    file.db.exec("INSERT INTO outbox (key, fingerprint, workflow, run_id, task, attempt, seq, kind, asset, committed_at) VALUES ('other-run', 'f', 'w', 'r2', 'ingest', 1, 1, 'event', 'a', 0)");
    const fenced = (row: OutboxRow, epoch: number): ItemResult => ({ status: 'fenced', seq: row.seq, key: row.key, code: 'fenced', epoch, detail: 'fenced' });
    const applied = applyAnswers(file, rows.slice(0, 2), [fenced(rows[0]!, 3), fenced(rows[1]!, 4)], NOW);
    const fence = { runId: 'r1', task: 'ingest', attempt: 1, by: 3 };
    expect(applied).toEqual({
      settled: rows.map((row) => ({ id: row.id, state: 'dead', key: '', code: 'fenced', reason: 'fenced by attempt 3', fence })),
      marked: 0,
      movedAway: 0,
      fence,
    });
    expect(file.runs.fenceOf({ runId: 'r1', task: 'ingest' }, 1)).toEqual(fence);
    expect(file.db.prepare("SELECT state FROM outbox WHERE run_id = 'r2'").pluck().get()).toBe('pending');
    expect((stateOf(file) as { dead_reason: string }[]).slice(0, 4).every((row) => row.dead_reason === 'fenced by attempt 3')).toBe(true);
  });

  it('reads a task-less stream as task null in its fence', () => {
    const file = new OutboxFile(join(tempDir(), 'outbox.db'), 'normal');
    files.push(file);
    file.db.exec("INSERT INTO outbox (key, fingerprint, workflow, run_id, task, attempt, seq, kind, asset, committed_at) VALUES ('k', 'f', 'w', 'r1', '', 1, 1, 'event', 'a', 0)");
    const rows = file.db.prepare('SELECT * FROM outbox').all() as OutboxRow[];
    const applied = applyAnswers(file, rows, [{ status: 'fenced', seq: 1, key: 'k', code: 'fenced', epoch: 2, detail: '' }], NOW);
    expect(applied.fence).toEqual({ runId: 'r1', task: null, attempt: 1, by: 2 });
    expect(file.runs.fenceOf({ runId: 'r1', task: '' }, 1)).toEqual({ runId: 'r1', task: null, attempt: 1, by: 2 });
  });

  it('refuses an answer for another key, and takes one without a key for the row in its place', () => {
    const { file, rows } = fileWithRows(2);
    expect(() => applyAnswers(file, rows, [{ status: 'accepted', seq: 1, key: 'someone-else', eventId: 'e', timestamp: 't' }], NOW)).toThrow(
      new DeliveryError('bad_response', `result 0 is for key someone-else, not ${rows[0]!.key}`),
    );
    const unplaced = applyAnswers(file, rows, [{ status: 'fenced', seq: null, key: null, code: 'fenced', epoch: 2, detail: '' }], NOW);
    expect(unplaced.fence).toMatchObject({ attempt: 1, by: 2 });
  });

  it('leaves a row that a newer attempt took over in flight, and counts it; a row settled already is neither', () => {
    const { file, rows } = fileWithRows(3);
    file.db.prepare('UPDATE outbox SET attempt = 2, seq = 1 WHERE id = ?').run(rows[0]!.id);
    file.db.prepare("UPDATE outbox SET state = 'delivered' WHERE id = ?").run(rows[1]!.id);
    const accepted = (row: OutboxRow): ItemResult => ({ status: 'accepted', seq: row.seq, key: row.key, eventId: 'e', timestamp: 't' });
    const applied = applyAnswers(file, rows.slice(0, 2), [accepted(rows[0]!), accepted(rows[1]!)], NOW);
    expect(applied).toEqual({ settled: [], marked: 0, movedAway: 1, fence: undefined });
    expect(file.db.prepare('SELECT state, event_id FROM outbox WHERE id = ?').get(rows[0]!.id)).toEqual({ state: 'pending', event_id: null });
  });

  it('leaves a checkpoint update rewritten in flight pending, and counts it, so that its new revision goes at once', () => {
    const { file, rows } = fileWithRows(3);
    const update = rows[2]!;
    expect(update.kind).toBe('checkpoint');
    file.db.prepare('UPDATE outbox SET revision = 1 WHERE id = ?').run(update.id);
    const applied = applyAnswers(file, [update], [{ status: 'checkpointed', seq: update.seq, key: update.key }], NOW);
    expect(applied).toEqual({ settled: [], marked: 0, movedAway: 1, fence: undefined });
    expect(file.db.prepare('SELECT state FROM outbox WHERE id = ?').pluck().get(update.id)).toBe('pending');
  });
});

describe('afterAnswers', () => {
  const { rows } = { rows: [{ seq: 5 }, { seq: 6 }] as OutboxRow[] };
  const applied = (marked: number, movedAway = 0, fence?: AppliedAnswers['fence']): AppliedAnswers => ({ settled: [], marked, movedAway, fence });
  const gap = (expectedSeq: number): ItemResult[] => [{ status: 'gap', seq: 5, key: 'k', expectedSeq }];

  it('goes on with the count of rows marked, some taken over in flight or not', () => {
    expect(afterAnswers(STREAM, rows, [], applied(2))).toBe(2);
    expect(afterAnswers(STREAM, rows, [], applied(2, 1))).toBe(2);
  });

  it('stops this attempt on a fence', () => {
    expect(() => afterAnswers(STREAM, rows, [], applied(2, 0, { runId: 'r1', task: null, attempt: 1, by: 3 }))).toThrow(
      new FencedError(1, 3, 'attempt 1 of run r1 was fenced by attempt 3: a later attempt has delivered, so this one may deliver nothing more; its pending rows are parked, and this process should stop'),
    );
  });

  it('stops on a gap before rows already settled: the server lost them', () => {
    let thrown: unknown;
    try {
      afterAnswers(STREAM, rows, gap(4), applied(0));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(StreamStateLostError);
    expect(thrown).toMatchObject({
      code: 'stream_state_lost',
      message:
        "the server expects seq 4 of stream p/r1 attempt 1, but this outbox settled every row before seq 5; the server's store was reset or restored from an old backup. The relay stops rather than resend out of order; see docs/operations.md",
    });
  });

  it('retries any other gap, and an answer that settled nothing, with backoff', () => {
    expect(() => afterAnswers(STREAM, rows, gap(5), applied(1))).toThrow(new DeliveryError('sequence_gap', 'the server expects seq 5 first; resending in order'));
    expect(() => afterAnswers(STREAM, rows, [], applied(0))).toThrow(new DeliveryError('no_progress', 'the server settled none of 2 rows; retrying with backoff'));
  });

  it('takes a gap before this batch but inside the requests sent with it for a race between them, not a lost store', () => {
    expect(() => afterAnswers(STREAM, rows, gap(4), applied(0), 3)).toThrow(new DeliveryError('sequence_gap', 'the server expects seq 4 first; resending in order'));
    expect(() => afterAnswers(STREAM, rows, gap(2), applied(0), 3)).toThrow(StreamStateLostError);
  });

  it('goes on when the rows were taken over by a newer attempt in flight', () => {
    expect(afterAnswers(STREAM, rows, [], applied(0, 2))).toBe(0);
  });
});
