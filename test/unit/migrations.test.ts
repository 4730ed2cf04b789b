import Database from 'better-sqlite3';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { KeyConflictError, OutboxFileError, openOutbox, SchemaTooNewError, type CommitTransaction, type Outbox } from '../../src/outbox/index.js';
import { outboxMigrations } from '../../src/outbox/file/migrations.js';
import { OutboxFile } from '../../src/outbox/file/outbox-file.js';
import { migrateSqlite, type Migration } from '../../src/sqlite/migrate.js';
import { RUN } from '../support/outbox.js';
import { tempDir } from '../support/temp.js';

const tooNew = (found: number, known: number) => new Error(`too new: ${found} > ${known}`);

describe('migrations', () => {
  it('create every table on an empty file and record the version', async () => {
    const path = join(tempDir(), 'outbox.db');
    const box = await openOutbox({ path, producer: 'p', run: RUN, server: 'http://127.0.0.1:9', relay: 'manual' });
    await box.close();
    const db = new Database(path);
    expect(db.pragma('user_version', { simple: true })).toBe(outboxMigrations.length);
    const tables = db.prepare("select name from sqlite_master where type = 'table' order by name").pluck().all();
    expect(tables).toEqual(['checkpoints', 'consumed', 'dead_letter_actions', 'held_emissions', 'lease', 'meta', 'outbox', 'run_outcomes', 'runs', 'trigger_arrivals', 'trigger_firings', 'trigger_rebuild']);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
  });

  it("carry a file from before 004 over: its attempts have opened it, and the relay's fence record moves to runs", async () => {
    const path = join(tempDir(), 'outbox.db');
    const db = new Database(path);
    migrateSqlite(db, outboxMigrations.slice(0, 3), tooNew);
    const row = (runId: string, attempt: number, seq: number) =>
      db
        .prepare(`INSERT INTO outbox (key, fingerprint, workflow, run_id, task, attempt, seq, kind, asset, committed_at)
                  VALUES (?, 'f', 'w', ?, 'ingest', ?, ?, 'event', 'batch_ready', 0)`)
        .run(`k-${runId}-${attempt}-${seq}`, runId, attempt, seq);
    row('r1', 1, 1);
    row('r1', 2, 1);
    row('r2', 1, 1);
    db.prepare("INSERT INTO meta (name, value) VALUES ('producer', 'p'), ('fenced', ?)").run(
      JSON.stringify({ runId: 'r2', task: 'ingest', attempt: 1, by: 4 }),
    );
    db.close();

    const box = await openOutbox({ path, producer: 'p', run: { ...RUN, runId: 'r3' }, server: 'http://127.0.0.1:9', relay: 'manual' });
    await box.close();
    const after = new Database(path);
    expect(after.prepare('SELECT run_id, task, opened_by, fenced_by FROM runs ORDER BY run_id').all()).toEqual([
      { run_id: 'r1', task: 'ingest', opened_by: 2, fenced_by: 0 },
      { run_id: 'r2', task: 'ingest', opened_by: 1, fenced_by: 4 },
      { run_id: 'r3', task: 'ingest', opened_by: 1, fenced_by: 0 },
    ]);
    expect(after.prepare("SELECT count(*) FROM meta WHERE name = 'fenced'").pluck().get()).toBe(0);
    after.close();
    // Attempt 1 of r1 is refused now: attempt 2 had committed to the file before the upgrade.
    await expect(
      openOutbox({ path, producer: 'p', run: { ...RUN, runId: 'r1', attempt: 1 }, server: 'http://127.0.0.1:9', relay: 'manual' }),
    ).rejects.toMatchObject({ code: 'fenced', fencedBy: 2 });
  });

  it("give the file's checkpoints of before 011 to the run that committed last, and none to another run", async () => {
    const dir = tempDir();
    const path = join(dir, 'old.db');
    const old = new Database(path);
    migrateSqlite(old, outboxMigrations.slice(0, 10), tooNew);
    const row = (id: number, runId: string, task: string) =>
      old
        .prepare(
          `INSERT INTO outbox (id, key, workflow, run_id, task, attempt, seq, kind, asset, partition_key, committed_at, state, key_scope, fingerprint)
           VALUES (?, ?, 'w', ?, ?, 1, 1, 'event', 'batch_ready', ?, 0, 'delivered', 'file', 'f')`,
        )
        .run(id, `00000000-0000-4000-8000-00000000000${id}`, runId, task, `p-${id}`);
    row(1, 'yesterday', 'ingest');
    row(2, RUN.runId, RUN.task);
    old.prepare("INSERT INTO checkpoints (name, value, updated_at) VALUES ('progress', '{\"batch\":7}', 0)").run();
    old.close();
    const progress = z.object({ batch: z.number() });
    const open = (runId: string) => openOutbox({ path, producer: 'p', run: { ...RUN, runId }, server: 'http://127.0.0.1:9', relay: 'manual', resume: 'never' });
    const owner = await open(RUN.runId);
    expect(owner.checkpoint('progress', progress).get()).toEqual({ batch: 7 });
    await owner.close();
    const other = await open('yesterday');
    expect(other.checkpoint('progress', progress).get()).toBeUndefined();
    await other.close();
  });

  it('carry rows from before 007 over: a re-commit of any of them is still caught, whatever its key was derived from', async () => {
    const dir = tempDir();
    const progress = z.object({ batch: z.number() });
    const commitAll = (box: Outbox, extra: number) =>
      box.commit((tx) => {
        tx.set(box.checkpoint('progress', progress), { batch: 1 });
        return [
          tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-1', extra: { n: extra } }),
          tx.emit(box.asset('batch_ready'), { key: 'load-1', extra: { n: extra } }),
          tx.emit(box.asset('batch_ready'), { extra: { n: extra } }),
        ];
      });
    const options = (path: string) => ({ path, producer: 'p', run: RUN, server: 'http://127.0.0.1:9', relay: 'manual' as const });
    // The rows a version 6 file would hold: written by today's code, copied into a file migrated to 006.
    const source = await openOutbox(options(join(dir, 'source.db')));
    const keys = commitAll(source, 1).map((emission) => emission.key);
    await source.close();
    const path = join(dir, 'old.db');
    const old = new Database(path);
    migrateSqlite(old, outboxMigrations.slice(0, 6), tooNew);
    old.exec(`ATTACH '${join(dir, 'source.db')}' AS source`);
    const columns = (old.prepare("SELECT name FROM pragma_table_info('outbox')").pluck().all() as string[]).join(', ');
    old.exec(`INSERT INTO outbox (${columns}) SELECT ${columns} FROM source.outbox; INSERT INTO meta SELECT * FROM source.meta;
              INSERT INTO runs SELECT * FROM source.runs; INSERT INTO checkpoints SELECT name, value, updated_at FROM source.checkpoints`);
    old.exec('DETACH source');
    old.close();

    const box = await openOutbox(options(path));
    const again = commitAll(box, 1);
    expect(again.map((emission) => emission.key)).toEqual(keys);
    const rows = () => box.file.db.prepare("SELECT key_scope FROM outbox WHERE kind = 'event' ORDER BY id").pluck().all();
    expect(rows()).toEqual(['legacy', 'legacy', 'legacy']);
    for (const emit of [
      (tx: CommitTransaction) => tx.emit(box.asset('batch_ready'), { partitionKey: 'batch-1', extra: { n: 2 } }),
      (tx: CommitTransaction) => tx.emit(box.asset('batch_ready'), { key: 'load-1', extra: { n: 2 } }),
    ]) {
      expect(() => box.commit(emit)).toThrow(KeyConflictError);
    }
    // A position-derived key names the commit's checkpoint values and the emission's place among the
    // other emissions without a partition (the explicit one is first): the same commit with another payload.
    const positional = (tx: CommitTransaction) => {
      tx.set(box.checkpoint('progress', progress), { batch: 1 });
      tx.emit(box.asset('batch_ready'), { key: 'load-1', extra: { n: 1 } });
      tx.emit(box.asset('batch_ready'), { extra: { n: 2 } });
    };
    expect(() => box.commit(positional)).toThrow(KeyConflictError);
    expect(rows()).toHaveLength(3);
    await box.close();
  });

  it('apply only the new steps to an existing file, keeping its data', () => {
    const path = join(tempDir(), 'm.db');
    const v1: Migration[] = [{ version: 1, name: '001', sql: 'CREATE TABLE a (x INTEGER);' }];
    const v2: Migration[] = [...v1, { version: 2, name: '002', sql: 'ALTER TABLE a ADD COLUMN y TEXT;' }];
    const db = new Database(path);
    expect(migrateSqlite(db, v1, tooNew)).toBe(0);
    db.exec('INSERT INTO a (x) VALUES (7)');
    expect(migrateSqlite(db, v2, tooNew)).toBe(1);
    expect(migrateSqlite(db, v2, tooNew)).toBe(2);
    expect(db.prepare('SELECT x, y FROM a').all()).toEqual([{ x: 7, y: null }]);
    db.close();
  });

  it('roll a failed step back whole, leaving the version where it was', () => {
    const db = new Database(join(tempDir(), 'm.db'));
    const broken: Migration[] = [{ version: 1, name: '001', sql: 'CREATE TABLE a (x INTEGER); CREATE TABLE a (y INTEGER);' }];
    expect(() => migrateSqlite(db, broken, tooNew)).toThrow(/already exists/);
    expect(db.pragma('user_version', { simple: true })).toBe(0);
    expect(db.prepare("select count(*) from sqlite_master where name = 'a'").pluck().get()).toBe(0);
    db.close();
  });

  it('refuse an outbox file whose schema is newer than this code knows', async () => {
    const path = join(tempDir(), 'outbox.db');
    const db = new Database(path);
    db.pragma('user_version = 99');
    db.close();
    const opening = openOutbox({ path, producer: 'p', run: RUN, server: 'http://127.0.0.1:9', relay: 'manual' });
    await expect(opening).rejects.toBeInstanceOf(SchemaTooNewError);
    await expect(opening).rejects.toMatchObject({
      code: 'schema_too_new',
      message: `${path}: schema version 99 is newer than this oncebox knows (${outboxMigrations.length}). A newer oncebox migrated it; upgrade oncebox rather than opening it with an older one.`,
    });
  });

  it.each([
    ['under a path that is a file, not a folder', (dir: string) => {
      writeFileSync(join(dir, 'plain'), 'x');
      return join(dir, 'plain', 'outbox.db');
    }, /EEXIST|ENOTDIR/],
    ['that is not a database', (dir: string) => {
      const path = join(dir, 'outbox.db');
      writeFileSync(path, Buffer.alloc(8192, 7));
      return path;
    }, /SQLITE_NOTADB: file is not a database/],
  ])('refuse a file %s with a typed error that names it and the cause', async (_what, pathIn, cause) => {
    const path = pathIn(tempDir());
    const opening = openOutbox({ path, producer: 'p', run: RUN, server: 'http://127.0.0.1:9', relay: 'manual' });
    await expect(opening).rejects.toBeInstanceOf(OutboxFileError);
    await expect(opening).rejects.toMatchObject({ code: 'outbox_file_unusable', file: path });
    const message = await opening.then(() => '', (error: Error) => error.message);
    expect(message.startsWith(`${path}: cannot use this outbox file (`)).toBe(true);
    expect(message).toMatch(cause);
    expect(message).toMatch(/Check that the path is right|Point it at the job's outbox file/);
  });

  it('create a missing folder for a job, and refuse a missing file for a tool', async () => {
    const path = join(tempDir(), 'nested', 'deeper', 'outbox.db');
    const box = await openOutbox({ path, producer: 'p', run: RUN, server: 'http://127.0.0.1:9', relay: 'manual', resume: 'never' });
    await box.close({ timeoutMs: 0 });
    expect(existsSync(path)).toBe(true);
    const missing = join(tempDir(), 'misspelt.db');
    expect(() => new OutboxFile(missing, 'full', false)).toThrow(OutboxFileError);
    expect(() => new OutboxFile(missing, 'full', false)).toThrow(`${missing}: cannot use this outbox file (ENOENT: no such file; check the path (it is never created here))`);
    expect(existsSync(missing)).toBe(false);
  });

  it('refuse a migration list that is not numbered 1, 2, 3 …', () => {
    const db = new Database(':memory:');
    expect(() => migrateSqlite(db, [{ version: 2, name: '002', sql: '' }], tooNew)).toThrow('migration 002 must be number 1');
    db.close();
  });
});
