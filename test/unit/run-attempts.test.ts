import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { FencedError } from '../../src/outbox/index.js';
import { OutboxFile } from '../../src/outbox/file/outbox-file.js';
import { tempDir } from '../support/temp.js';

/**
 * The rule an outbox file keeps about each run's attempts (src/outbox/file/run-attempts.ts), on a real file:
 * which attempt supersedes which, what a newer attempt takes over when it opens the file, and what a
 * fence records.
 */
const files: OutboxFile[] = [];
afterEach(() => {
  for (const file of files.splice(0)) file.close();
});

function newFile(): OutboxFile {
  const file = new OutboxFile(join(tempDir(), 'outbox.db'), 'normal');
  files.push(file);
  return file;
}

const run = { runId: 'r1', task: 'ingest' };
let keys = 0;

/** A raw outbox row of `attempt` at `seq`, in a given state, as an earlier process left it. */
function row(file: OutboxFile, attempt: number, seq: number, state = 'pending', deadCode: string | null = null, runId = run.runId): number {
  const result = file.db
    .prepare(
      `INSERT INTO outbox (key, fingerprint, workflow, run_id, task, attempt, seq, kind, asset, committed_at, state, dead_code, dead_reason)
       VALUES (?, 'f', 'w', ?, ?, ?, ?, 'event', 'batch_ready', 0, ?, ?, ?)`,
    )
    .run(`key-${++keys}`, runId, run.task, attempt, seq, state, deadCode, deadCode === null ? null : `${deadCode} reason`);
  return Number(result.lastInsertRowid);
}

const rowsOf = (file: OutboxFile) =>
  file.db.prepare('SELECT id, run_id, attempt, seq, state, dead_code, dead_reason, settled_at FROM outbox ORDER BY id').all();

describe('the attempts of a run in an outbox file', () => {
  it('say no attempt is superseded before any opened the file', () => {
    const file = newFile();
    expect(file.runs.supersededBy(run, 1)).toBeUndefined();
    expect(() => file.runs.assertCurrent(run, 1)).not.toThrow();
    expect(file.runs.fenceOf(run, 1)).toBeUndefined();
  });

  it('tell the highest attempt seen, the current one and whether a later one fenced this file, from openings and fences alike', () => {
    const file = newFile();
    const other = { runId: 'r2', task: run.task };
    // Nothing known: no attempt seen, the caller's fallback is current, nothing fenced here.
    expect(file.runs.highestSeen(run)).toBe(0);
    expect(file.runs.currentAttempt(run, 7)).toBe(7);
    expect(file.runs.isFencedHere(run)).toBe(false);
    file.runs.open(run, 2);
    expect(file.runs.highestSeen(run)).toBe(2);
    expect(file.runs.currentAttempt(run, 7)).toBe(2);
    expect(file.runs.isFencedHere(run)).toBe(false);
    // The server said attempt 4 delivered: seen, but attempt 2 is still the newest that opened this file.
    file.runs.recordFence(run, 4);
    expect(file.runs.highestSeen(run)).toBe(4);
    expect(file.runs.currentAttempt(run, 7)).toBe(2);
    expect(file.runs.isFencedHere(run)).toBe(true);
    // Attempt 4 opens the file itself: no longer fenced here.
    file.runs.open(run, 4);
    expect(file.runs.isFencedHere(run)).toBe(false);
    // A fence known for a run that never opened this file: seen, the fallback is current, fenced here.
    file.runs.recordFence(other, 3);
    expect(file.runs.highestSeen(other)).toBe(3);
    expect(file.runs.currentAttempt(other, 1)).toBe(1);
    expect(file.runs.isFencedHere(other)).toBe(true);
  });

  it('supersede every older attempt once one opened the file, and none that is the same or newer', () => {
    const file = newFile();
    file.runs.open(run, 3);
    expect(file.runs.supersededBy(run, 2)).toEqual({ by: 3, how: 'opened' });
    expect(file.runs.supersededBy(run, 3)).toBeUndefined();
    expect(file.runs.supersededBy(run, 4)).toBeUndefined();
    expect(file.runs.supersededBy({ runId: 'r2', task: run.task }, 1)).toBeUndefined();
    expect(() => file.runs.assertCurrent(run, 2)).toThrow(
      new FencedError(2, 3, 'attempt 2 of run r1 is fenced by attempt 3, which has opened this outbox file: this attempt is a zombie and must stop; its work is being done by the later attempt'),
    );
  });

  it('supersede the attempts below a fence the server reported, saying so, and keep the highest fence', () => {
    const file = newFile();
    file.runs.open(run, 2);
    file.runs.recordFence(run, 5);
    file.runs.recordFence(run, 4);
    expect(file.runs.supersededBy(run, 4)).toEqual({ by: 5, how: 'delivered' });
    expect(file.runs.supersededBy(run, 1)).toEqual({ by: 5, how: 'delivered' });
    expect(file.runs.supersededBy(run, 5)).toBeUndefined();
    expect(file.runs.fenceOf(run, 4)).toEqual({ runId: 'r1', task: 'ingest', attempt: 4, by: 5 });
    expect(file.runs.fenceOf(run, 5)).toBeUndefined();
    expect(file.runs.fenceOf({ runId: 'r1', task: '' }, 1)).toBeUndefined();
    let thrown: FencedError | undefined;
    try {
      file.runs.assertCurrent(run, 4);
    } catch (error) {
      thrown = error as FencedError;
    }
    expect(thrown).toMatchObject({
      code: 'fenced',
      attempt: 4,
      fencedBy: 5,
      message: 'attempt 4 of run r1 is fenced by attempt 5, which has claimed this run at the server or delivered to it: this attempt is a zombie and must stop; its work is being done by the later attempt',
    });
  });

  it('name the opening when an attempt both opened the file and was reported, at the same number', () => {
    const file = newFile();
    file.runs.open(run, 5);
    file.runs.recordFence(run, 5);
    expect(file.runs.supersededBy(run, 4)).toEqual({ by: 5, how: 'opened' });
    file.runs.recordFence(run, 6);
    expect(file.runs.supersededBy(run, 4)).toEqual({ by: 6, how: 'delivered' });
  });

  it('record a fence for a run that never opened the file, with a task-less run read as task null', () => {
    const file = newFile();
    const workflowLevel = { runId: 'r9', task: '' };
    file.runs.recordFence(workflowLevel, 2);
    expect(file.runs.fenceOf(workflowLevel, 1)).toEqual({ runId: 'r9', task: null, attempt: 1, by: 2 });
    expect(file.db.prepare("SELECT opened_by, fenced_by FROM runs WHERE run_id = 'r9'").get()).toEqual({ opened_by: 0, fenced_by: 2 });
  });

  it('refuse to open an older attempt than one that opened the file or was reported', () => {
    const file = newFile();
    file.runs.open(run, 2);
    expect(() => file.runs.open(run, 1)).toThrow(FencedError);
    file.runs.recordFence(run, 4);
    expect(() => file.runs.open(run, 3)).toThrow(expect.objectContaining({ attempt: 3, fencedBy: 4 }));
    expect(file.db.prepare('SELECT opened_by FROM runs').pluck().get()).toBe(2);
  });

  it("let a newer attempt take over the older attempts' pending and fenced rows, renumbered from 1 in commit order", () => {
    const file = newFile();
    expect(file.runs.open(run, 1)).toEqual({ lastWriter: undefined, adopted: 0 });
    const delivered = row(file, 1, 1, 'delivered');
    const pendingA = row(file, 1, 2);
    const rejected = row(file, 1, 3, 'dead', 'unknown_asset');
    const fenced = row(file, 1, 4, 'dead', 'fenced');
    const pendingB = row(file, 1, 5);
    const otherRun = row(file, 1, 1, 'pending', null, 'r2');
    expect(file.runs.open(run, 3)).toEqual({ lastWriter: 1, adopted: 3 });
    const byId = new Map((rowsOf(file) as { id: number }[]).map((r) => [r.id, r]));
    expect(byId.get(delivered)).toMatchObject({ attempt: 1, seq: 1, state: 'delivered' });
    expect(byId.get(pendingA)).toEqual({ id: pendingA, run_id: 'r1', attempt: 3, seq: 1, state: 'pending', dead_code: null, dead_reason: null, settled_at: null });
    expect(byId.get(rejected)).toMatchObject({ attempt: 1, seq: 3, state: 'dead', dead_code: 'unknown_asset' });
    expect(byId.get(fenced)).toEqual({ id: fenced, run_id: 'r1', attempt: 3, seq: 2, state: 'pending', dead_code: null, dead_reason: null, settled_at: null });
    expect(byId.get(pendingB)).toMatchObject({ attempt: 3, seq: 3, state: 'pending' });
    expect(byId.get(otherRun)).toMatchObject({ run_id: 'r2', attempt: 1, seq: 1, state: 'pending' });
    expect(file.runs.supersededBy(run, 2)).toEqual({ by: 3, how: 'opened' });
  });

  it('take nothing over when the same attempt opens the file again, nor number from 1 past rows it already has', () => {
    const file = newFile();
    file.runs.open(run, 2);
    row(file, 2, 1);
    row(file, 2, 2);
    const leftover = row(file, 1, 7); // written by an older process that slipped in before the upgrade
    expect(file.runs.open(run, 2)).toEqual({ lastWriter: 2, adopted: 0 });
    expect(file.db.prepare('SELECT attempt, seq FROM outbox WHERE id = ?').get(leftover)).toEqual({ attempt: 1, seq: 7 });
    // A newer attempt that somehow has rows already numbers the ones it takes over after them.
    row(file, 3, 1);
    expect(file.runs.open(run, 3)).toEqual({ lastWriter: 3, adopted: 3 });
    expect(file.db.prepare('SELECT attempt, seq FROM outbox WHERE attempt = 3 ORDER BY seq').all()).toEqual([
      { attempt: 3, seq: 1 },
      { attempt: 3, seq: 2 },
      { attempt: 3, seq: 3 },
      { attempt: 3, seq: 4 },
    ]);
  });
});
