import Database from 'better-sqlite3';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runScript, startScript } from '../support/child.js';
import { expectEachBatchOnceInOrder } from '../support/batches.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const BATCHES = 50;
const JOB = 'examples/batch-ingest.ts';

function job(server: string, db: string, dir: string, attempt: number, extra: string[] = []) {
  return ['--db', db, '--server', server, '--data', join(dir, 'data'), '--attempt', String(attempt), '--batches', String(BATCHES), ...extra];
}

describe('task retries', () => {
  it('on a fresh machine: attempt 2 resumes from the server, and batches attempt 1 delivered keep their original receipts', async () => {
    const server = await startServer();
    const dir = tempDir();
    const first = await runScript(JOB, job(server.url, join(dir, 'a1.db'), dir, 1, ['--kill-before-commit', '31', '--pause-ms', '10']));
    expect(first.signal).toBe('SIGKILL');
    const deliveredByFirst = await server.events();
    expect(deliveredByFirst.length).toBeGreaterThan(0);
    // The machine is gone, and its outbox file with it.
    for (const suffix of ['', '-wal', '-shm']) rmSync(join(dir, `a1.db${suffix}`), { force: true });

    const second = await runScript(JOB, job(server.url, join(dir, 'a2.db'), dir, 2));
    expect(second.code, second.stderr).toBe(0);
    const start = second.lines[0] as { resumeFrom: number; fromServer: boolean };
    expect(start.fromServer).toBe(true);
    // The server's checkpoint copy is never ahead of the events it accepted.
    expect(start.resumeFrom).toBeGreaterThan(0);
    expect(start.resumeFrom).toBeLessThanOrEqual(deliveredByFirst.length);

    const events = await expectEachBatchOnceInOrder(server, BATCHES);
    expect(events.slice(0, deliveredByFirst.length)).toEqual(deliveredByFirst);
    // What attempt 2 re-processed came back as duplicates carrying attempt 1's event ids.
    const file = new Database(join(dir, 'a2.db'), { readonly: true });
    const redone = file.prepare("SELECT partition_key AS partitionKey, event_id AS eventId, duplicate FROM outbox WHERE kind = 'event' AND duplicate = 1").all() as { partitionKey: string; eventId: string }[];
    file.close();
    expect(redone.length).toBe(deliveredByFirst.length - start.resumeFrom);
    for (const row of redone) expect(row.eventId).toBe(deliveredByFirst.find((e) => e.partitionKey === row.partitionKey)!.eventId);
  });

  it('beside a zombie: the old attempt is fenced and stops, and each batch is stored once', async () => {
    const server = await startServer();
    const dir = tempDir();
    // The zombie lost its heartbeat after batch 5: it is frozen (SIGSTOP) while its retry runs and
    // delivers, then thaws and goes on, as a paused VM does. Frozen, not slowed: on a busy machine a slow
    // zombie could otherwise finish all its batches before the retry delivered one.
    const zombie = startScript(JOB, job(server.url, join(dir, 'zombie.db'), dir, 1, ['--pause-ms', '120']));
    await zombie.waitFor((line) => line.event === 'committed' && line.batch === 5);
    zombie.signal('SIGSTOP');
    const retry = await runScript(JOB, job(server.url, join(dir, 'retry.db'), dir, 2, ['--pause-ms', '5']));
    expect(retry.code, retry.stderr).toBe(0);
    zombie.signal('SIGCONT');
    const zombieResult = await zombie.done;
    expect(zombieResult.code, zombieResult.stderr).toBe(3);
    expect(zombieResult.lines.at(-1)).toEqual({ event: 'fenced', attempt: 1, by: 2 });

    const events = await expectEachBatchOnceInOrder(server, BATCHES);
    // No item of attempt 1 was accepted after attempt 2 first delivered.
    const firstOfRetry = events.findIndex((event) => event.attempt === 2);
    expect(firstOfRetry).toBeGreaterThan(0);
    expect(events.slice(firstOfRetry).every((event) => event.attempt === 2)).toBe(true);

    const status = await runScript('src/cli/main.ts', ['status', join(dir, 'zombie.db'), '--json']);
    expect(status.lines[0]).toMatchObject({ fenced: true, fencedBy: 2, run: { attempt: 1 } });
  });

  it("on the same machine: attempt 2 takes over attempt 1's committed leftovers and delivers them first, as its own", async () => {
    const server = await startServer();
    const dir = tempDir();
    const db = join(dir, 'outbox.db');
    // Attempt 1 cannot reach the server, commits ten batches and dies.
    const first = await runScript(JOB, job('http://127.0.0.1:9', db, dir, 1, ['--kill-before-commit', '11']));
    expect(first.signal).toBe('SIGKILL');
    expect(await server.events()).toEqual([]);

    const second = await runScript(JOB, job(server.url, db, dir, 2));
    expect(second.code, second.stderr).toBe(0);
    expect(second.lines[0]).toMatchObject({ resumeFrom: 10, fromServer: false });
    const events = await expectEachBatchOnceInOrder(server, BATCHES);
    // The leftovers became attempt 2's rows (seq 1…20, an event and a checkpoint update each), so no fence
    // of attempt 1 can lose them: the file's checkpoint already counts them.
    expect(events.map((event) => [event.attempt, event.seq])).toEqual(Array.from({ length: 50 }, (_, i) => [2, 2 * i + 1]));
  });
});
