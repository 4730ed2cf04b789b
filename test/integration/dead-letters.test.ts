import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DeadLetters } from '../../src/outbox/file/dead-letters.js';
import { openOutbox, type OutboxLogger } from '../../src/outbox/index.js';
import { OutboxFile } from '../../src/outbox/file/outbox-file.js';
import { deadRowRemedy } from '../../src/protocol/rejection-fixes.js';
import { runScript } from '../support/child.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { RUN } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const CLI = 'src/cli/main.ts';
const quiet: OutboxLogger = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** A file whose job emitted batch-1..3 with batch-2 to an asset the server did not know yet. */
async function fileWithDeadRow(url: string) {
  const path = join(tempDir(), 'outbox.db');
  const box = await openOutbox({ path, producer: 'p', run: RUN, server: url, logger: quiet });
  box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-1' }));
  box.commit((tx) => tx.emit(box.asset('late_asset'), { partitionKey: 'batch-2', extra: { rows: 7 } }));
  box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-3' }));
  expect(await box.close()).toMatchObject({ pending: 0, dead: 1 });
  return path;
}

function actions(path: string) {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare("SELECT action, dead_code, note, json_extract(row, '$.partition_key') AS partition FROM dead_letter_actions ORDER BY id").all();
  } finally {
    db.close();
  }
}

describe('dead letters', () => {
  it('send a dead row again, once its cause is fixed: exactly one event, however often it is retried', async () => {
    const { url, server } = await startServer();
    const path = await fileWithDeadRow(url);
    const listed = await runScript(CLI, ['dead', 'list', path]);
    // Each row with the server's reason, then what fixes it, with this file's command and both remedies.
    expect(listed.lines.map((l) => l.text)).toEqual([
      expect.stringMatching(/^#2 late_asset batch-2 \(run 2026-11-30 attempt 1, key [0-9a-f-]+\) \[unknown_asset\] asset: "late_asset" is not registered on this server$/),
      `fix unknown_asset: Register the asset (oncebox server --assets FILE, or PUT /v1/assets/late_asset with an admin token), then send the dead rows again: oncebox dead retry ${path} --all. If the name is misspelt, correct it in the job and publish those partitions again instead (docs/runbook.md).`,
    ]);

    // Sent again before the cause is fixed, it dies again, and nothing is stored.
    const tooSoon = await runScript(CLI, ['dead', 'retry', path, '--id', '2']);
    expect(tooSoon.code).toBe(0);
    expect((await runScript(CLI, ['relay', path, '--server', url, '--drain'])).code).toBe(3);
    expect((await server.store.listEvents({ after: 0, limit: 10 })).events.map((e) => e.partitionKey)).toEqual(['batch-1', 'batch-3']);

    await server.store.registerAsset('late_asset');
    const [dead] = new DeadLetters(new OutboxFile(path, 'full', false)).list();
    const retried = await runScript(CLI, ['dead', 'retry', path, '--all', '--note', 'asset registered']);
    expect(retried.lines[0]!.text).toMatch(new RegExp(`^row ${dead!.id} goes out again as row \\d+ \\(attempt 1, seq 5, key ${dead!.key}\\)$`));
    expect((await runScript(CLI, ['relay', path, '--server', url, '--drain'])).code).toBe(0);
    // Retrying again finds nothing dead; a second drain sends nothing.
    expect((await runScript(CLI, ['dead', 'retry', path, '--all'])).lines).toEqual([{ text: `${path}: no dead rows to send again` }]);
    expect((await runScript(CLI, ['relay', path, '--server', url, '--drain'])).code).toBe(0);

    const events = (await server.store.listEvents({ after: 0, limit: 10 })).events;
    expect(events.map((e) => [e.partitionKey, e.key])).toEqual([
      ['batch-1', expect.any(String)],
      ['batch-3', expect.any(String)],
      ['batch-2', dead!.key],
    ]);
    expect(events[2]!.extra).toEqual({ rows: 7 });
    expect(actions(path)).toEqual([
      { action: 'retried', dead_code: 'unknown_asset', note: '', partition: 'batch-2' },
      { action: 'retried', dead_code: 'unknown_asset', note: 'asset registered', partition: 'batch-2' },
    ]);

    // The job goes on committing after the row that went out again.
    const box = await openOutbox({ path, producer: 'p', run: RUN, server: url, logger: quiet });
    box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-4' }));
    expect(await box.close()).toMatchObject({ pending: 0, dead: 0 });
    expect((await server.store.listEvents({ after: 0, limit: 10 })).events.map((e) => e.partitionKey)).toEqual(['batch-1', 'batch-3', 'batch-2', 'batch-4']);
  });

  it('send a dead row again exactly once when its acknowledgement is lost', async () => {
    const { url, server } = await startServer();
    const path = await fileWithDeadRow(url);
    await server.store.registerAsset('late_asset');
    const proxy = await startFaultProxy(url);
    proxy.plan('drop-response', 'drop-response');
    const file = new OutboxFile(path, 'full', false);
    new DeadLetters(file).retry('all');
    file.close();
    expect((await runScript(CLI, ['relay', path, '--server', proxy.url, '--drain'])).code).toBe(0);
    expect(proxy.stats.forwarded).toBeGreaterThanOrEqual(3);
    expect((await server.store.listEvents({ after: 0, limit: 10 })).events.map((e) => e.partitionKey)).toEqual(['batch-1', 'batch-3', 'batch-2']);
  });

  it('discard a dead row on the record, and refuse what cannot go again with the reason', async () => {
    const { url } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'p', run: RUN, server: url, logger: quiet });
    box.commit((tx) => tx.emit(box.asset('nope'), { partitionKey: 'a' }));
    box.commit((tx) => tx.emit(box.asset('nope'), { partitionKey: 'b' }));
    await box.close();
    // A key the server holds with another payload: sending it again would only conflict again.
    const file = new OutboxFile(path, 'full', false);
    file.db.prepare("UPDATE outbox SET dead_code = 'key_conflict' WHERE partition_key = 'b'").run();
    file.close();

    // Asked for by id, a row that cannot go again stays dead, saying why, as with --all; nothing is sent.
    const refused = await runScript(CLI, ['dead', 'retry', path, '--id', '1', '--id', '2']);
    expect(refused.code).toBe(3);
    const conflict = `row 2 stays dead: ${deadRowRemedy('key_conflict', { asset: 'nope', file: path, ids: [2] }).fix}`;
    expect(conflict).toContain(`oncebox dead discard ${path} --id 2`);
    expect(refused.lines.map((l) => l.text)).toEqual([conflict, 'nothing was sent again: rows asked for by id go all together or not at all']);
    const all = await runScript(CLI, ['dead', 'retry', path, '--all']);
    expect(all.code).toBe(3);
    expect(all.lines.map((l) => l.text)).toContain(conflict);

    const discarded = await runScript(CLI, ['dead', 'discard', path, '--id', '2', '--note', 'superseded by batch c']);
    expect(discarded.lines[0]!.text).toMatch(/^discarded #2 nope b /);
    const list = await runScript(CLI, ['dead', 'list', path, '--json']);
    expect((list.lines[0] as { dead: { id: number }[] }).dead.map((row) => row.id)).toEqual([]);
    expect(actions(path)).toEqual([
      { action: 'retried', dead_code: 'unknown_asset', note: '', partition: 'a' },
      { action: 'discarded', dead_code: 'key_conflict', note: 'superseded by batch c', partition: 'b' },
    ]);
    expect((await runScript(CLI, ['dead', 'show', path, '--id', '9'])).stderr).toContain('dead show: row 9 of');
    expect((await runScript(CLI, ['dead', 'retry', path])).stderr).toContain('dead retry: give the rows with --id N (repeatable), or --all');
  });

  it('say one remedy per code, the same in close(), oncebox status and dead retry as in the server\'s catalog, and send again only what the remedy says can go', async () => {
    const server = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'p', run: RUN, server: server.url, logger: quiet });
    for (const partitionKey of ['a', 'b', 'c', 'd']) box.commit((tx) => tx.emit(box.asset('nope'), { partitionKey }));
    await box.close();
    // As the server would refuse them: b under a key it holds with other content, c at a position another row holds, d for its content.
    const file = new OutboxFile(path, 'full', false);
    for (const [partition, code] of [['b', 'key_conflict'], ['c', 'sequence_reused'], ['d', 'invalid_item']]) {
      file.db.prepare('UPDATE outbox SET dead_code = ? WHERE partition_key = ?').run(code, partition);
    }
    file.close();
    const remedy = (code: string, id: number) => deadRowRemedy(code, { asset: 'nope', file: path, ids: [id] });

    const status = await runScript(CLI, ['status', path]);
    expect(status.code).toBe(3);
    const next = status.lines.map((line) => line.text as string).filter((line) => line.startsWith('next'));
    expect(next).toEqual([
      `next       unknown_asset: ${remedy('unknown_asset', 1).fix}`,
      `next       key_conflict: ${remedy('key_conflict', 2).fix}`,
      `next       sequence_reused: ${remedy('sequence_reused', 3).fix}`,
      `next       invalid_item: ${remedy('invalid_item', 4).fix}`,
      `next       \`oncebox dead list ${path}\` shows each.`,
    ]);
    // The same sentences at close(), where a job's last line says what it leaves.
    const again = await openOutbox({ path, producer: 'p', run: RUN, server: 'http://127.0.0.1:9', relay: 'manual', resume: 'never', logger: quiet });
    const closed = await again.close({ timeoutMs: 0 });
    for (const [code, id] of [['unknown_asset', 1], ['key_conflict', 2], ['sequence_reused', 3], ['invalid_item', 4]] as const) {
      expect(closed.summary).toContain(`${code}: ${remedy(code, id).fix}`);
      // The console's rejections read the server's catalog, whose fix is the same but for the file it cannot know.
      expect(deadRowRemedy(code, { asset: 'nope' }).fix).toBe(remedy(code, id).fix.replaceAll(path, '<outbox file>').replace(`--id ${id}`, '--id N'));
    }
    // Only what its remedy says can go is sent again; each other row says its remedy as the reason.
    const retried = await runScript(CLI, ['dead', 'retry', path, '--all', '--json']);
    const { retried: sent, skipped } = retried.lines[0] as { retried: { id: number }[]; skipped: { id: number; why: string }[] };
    expect(sent.map((row) => row.id)).toEqual([1]);
    expect(skipped).toEqual([2, 3, 4].map((id) => ({ id, why: remedy(['key_conflict', 'sequence_reused', 'invalid_item'][id - 2]!, id).fix })));
    for (const code of ['unknown_asset', 'forbidden', 'attempt_too_high', 'lineage_too_deep', 'feedback_loop']) expect(deadRowRemedy(code, { asset: 'x' }).retry, code).toBe(true);
    for (const code of ['key_conflict', 'sequence_reused', 'invalid_item', 'too_many_checkpoints', 'fenced']) expect(deadRowRemedy(code, { asset: 'x' }).retry, code).toBe(false);
  });

  it('keep a row refused for its content dead, since the server would refuse it again, and name the discard that clears it', async () => {
    const { url } = await startServer();
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'p', run: RUN, server: url, logger: quiet });
    box.commit((tx) => tx.emit(box.asset('nope'), { partitionKey: 'a' }));
    await box.close();
    // Refused for its shape (a server with other limits than the job's): the same content is refused again.
    const file = new OutboxFile(path, 'full', false);
    file.db.prepare("UPDATE outbox SET dead_code = 'invalid_item', dead_reason = 'extra: too large' WHERE partition_key = 'a'").run();
    file.close();
    const all = await runScript(CLI, ['dead', 'retry', path, '--all']);
    expect(all.code).toBe(3);
    expect(all.lines.map((l) => l.text)).toEqual([
      `row 1 stays dead: The server refuses its content, and would again: fix the emission in the job (the detail names the field) and emit it anew under a new key, then drop this row on the record: oncebox dead discard ${path} --id 1.`,
    ]);
    expect((await runScript(CLI, ['dead', 'discard', path, '--id', '1'])).code).toBe(0);
    expect((await runScript(CLI, ['dead', 'list', path])).lines).toEqual([{ text: `${path}: no dead rows` }]);
  });
});
