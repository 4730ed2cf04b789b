import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { runScript } from '../support/child.js';
import { seededPlan } from '../support/plan.js';
import { batchPartition, expectEachBatchOnceInOrder } from '../support/batches.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const BATCHES = 12;
const JOB = 'examples/batch-ingest.ts';
const partition = (batch: number) => batchPartition(batch);

interface FileState {
  checkpoint: number | undefined;
  partitions: string[];
}

/** What a killed job left in its outbox file, read with plain SQLite. */
function readFile(path: string): FileState {
  const db = new Database(path, { readonly: true });
  const value = db.prepare("SELECT value FROM checkpoints WHERE name = 'backlog'").pluck().get() as string | undefined;
  const partitions = db.prepare("SELECT partition_key FROM outbox WHERE kind = 'event' ORDER BY id").pluck().all() as string[];
  db.close();
  return { checkpoint: value === undefined ? undefined : JSON.parse(value).batch, partitions };
}

async function runJob(server: RunningServer, dir: string, attempt: number, extra: string[] = [], env: Record<string, string> = {}) {
  return runScript(JOB, ['--db', join(dir, 'outbox.db'), '--server', server.url, '--data', join(dir, 'data'), '--attempt', String(attempt), '--batches', String(BATCHES), ...extra], { env });
}

describe('a job killed with SIGKILL', () => {
  it.each([
    ['before commit', ['--kill-before-commit', '5'], {}, 4],
    ['inside the commit, rows written but not committed', [], { ONCEBOX_FAILPOINT: 'commit:after-write@5' }, 4],
    ['after the commit, before delivery', [], { ONCEBOX_FAILPOINT: 'commit:after-commit@5' }, 5],
  ] as const)('%s never leaves a checkpoint without its emissions, and a restart delivers each once', async (_name, args, env, committed) => {
    const server = await startServer();
    const dir = tempDir();
    const killed = await runJob(server, dir, 1, [...args], env);
    expect(killed.signal).toBe('SIGKILL');
    const state = readFile(join(dir, 'outbox.db'));
    expect(state.checkpoint).toBe(committed);
    expect(state.partitions).toEqual(Array.from({ length: committed }, (_, i) => partition(i + 1)));

    const rerun = await runJob(server, dir, 2);
    expect(rerun.code).toBe(0);
    expect(rerun.lines[0]).toMatchObject({ event: 'start', resumeFrom: committed });
    await expectEachBatchOnceInOrder(server, BATCHES);
  });

  it('while another task of the run commits to the same file, is retried from its own checkpoint, and neither task loses or repeats a batch', async () => {
    const server = await startServer();
    const dir = tempDir();
    const task = (name: string, attempt: number, env: Record<string, string> = {}) =>
      runScript(
        JOB,
        ['--db', join(dir, 'outbox.db'), '--server', server.url, '--data', join(dir, name), '--attempt', String(attempt), '--batches', String(BATCHES), '--task', name, '--partition-prefix', `${name}-`, '--pause-ms', '20'],
        { env },
      );
    // Both at once, as two processes on one file: transform is killed after its 5th commit, extract runs on.
    const [killed, other] = await Promise.all([task('transform', 1, { ONCEBOX_FAILPOINT: 'commit:after-commit@5' }), task('extract', 1)]);
    expect(killed.signal).toBe('SIGKILL');
    expect(other.code, other.stderr).toBe(0);
    const retried = await task('transform', 2);
    expect(retried.code, retried.stderr).toBe(0);
    // transform resumes from its own checkpoint (5), not extract's (12).
    expect(retried.lines[0]).toMatchObject({ event: 'start', resumeFrom: 5 });
    const events = await server.events();
    for (const name of ['extract', 'transform']) {
      expect(events.filter((event) => event.task === name).map((event) => event.partitionKey)).toEqual(Array.from({ length: BATCHES }, (_, i) => `${name}-${partition(i + 1)}`));
    }
  });

  it('after the server stored a batch but before the relay recorded the receipt, gets the original receipt on retry', async () => {
    const server = await startServer();
    const dir = tempDir();
    const killed = await runJob(server, dir, 1, [], { ONCEBOX_FAILPOINT: 'relay:after-response@1' });
    expect(killed.signal).toBe('SIGKILL');
    const storedBefore = await server.events();
    expect(storedBefore.length).toBeGreaterThan(0);
    const db = new Database(join(dir, 'outbox.db'), { readonly: true });
    expect(db.prepare("SELECT count(*) FROM outbox WHERE state = 'delivered'").pluck().get()).toBe(0);
    db.close();

    const rerun = await runJob(server, dir, 2);
    expect(rerun.code).toBe(0);
    await expectEachBatchOnceInOrder(server, BATCHES);
    const after = new Database(join(dir, 'outbox.db'), { readonly: true });
    const receipts = after.prepare("SELECT partition_key AS partitionKey, event_id AS eventId, event_ts AS timestamp, duplicate FROM outbox WHERE kind = 'event' ORDER BY id").all() as { partitionKey: string; eventId: string; timestamp: string; duplicate: number }[];
    after.close();
    // The rows the server had stored came back as duplicates carrying the original event id and time.
    for (const stored of storedBefore) {
      expect(receipts.find((row) => row.partitionKey === stored.partitionKey)).toEqual({
        partitionKey: stored.partitionKey,
        eventId: stored.eventId,
        timestamp: stored.timestamp,
        duplicate: 1,
      });
    }
  });

  it('at random moments of a tight commit loop, round after round, never leaves the checkpoint and the emissions apart', async () => {
    const rounds = 20;
    const { plan } = seededPlan('commit-loop kills', fc.array(fc.integer({ min: 30, max: 300 }), { minLength: rounds, maxLength: rounds }));
    const dir = tempDir();
    const db = join(dir, 'outbox.db');
    let reached = 0;
    for (const [round, killAfterMs] of plan.entries()) {
      // No server: every commit stays pending, and the loop commits as fast as fsync allows.
      const killed = await runScript(JOB, ['--db', db, '--server', 'http://127.0.0.1:9', '--data', join(dir, 'data'), '--batches', '1000000'], {
        onLine: (line, kill) => {
          if (line.event === 'start') setTimeout(kill, killAfterMs);
        },
      });
      expect(killed.signal, `round ${round}: ${killed.stderr}`).toBe('SIGKILL');
      const state = readFile(db);
      // Every batch up to the checkpoint has its emission, and no batch past it has one.
      expect(state.partitions, `round ${round}, killed after ${killAfterMs} ms`).toEqual(
        Array.from({ length: state.checkpoint ?? 0 }, (_, i) => partition(i + 1)),
      );
      expect(state.checkpoint ?? 0).toBeGreaterThanOrEqual(reached);
      reached = state.checkpoint ?? 0;
    }
    expect(reached, 'the loop got somewhere').toBeGreaterThan(rounds);
  }, 300_000);
});
