import type Database from 'better-sqlite3';
import { InternalError } from '../protocol/errors.js';

/** One numbered, append-only schema step. Never edit one that has shipped; add the next number. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/**
 * Brings a SQLite file up to the newest migration. The version lives in `PRAGMA user_version`, read and
 * written inside the same IMMEDIATE transaction as the migration, so two processes migrating one file at
 * once cannot both apply a step: the second waits for the lock and then sees the new version.
 *
 * @returns the version the file was at before.
 * @internal
 */
export function migrateSqlite(
  db: Database.Database,
  migrations: readonly Migration[],
  onTooNew: (found: number, known: number) => Error,
): number {
  const known = migrations.length;
  checkMigrationNumbers(migrations);
  const readVersion = () => db.pragma('user_version', { simple: true }) as number;
  const before = readVersion();
  if (before > known) throw onTooNew(before, known);
  for (const migration of migrations) {
    db.transaction(() => {
      const current = readVersion();
      if (current > known) throw onTooNew(current, known);
      if (current >= migration.version) return;
      db.exec(migration.sql);
      db.pragma(`user_version = ${migration.version}`);
    }).immediate();
  }
  return before;
}

/** @internal Migrations are numbered 1, 2, 3…, in order: a gap or a swap is a bug in oncebox. */
export function checkMigrationNumbers(migrations: readonly { version: number; name: string }[]): void {
  migrations.forEach((migration, index) => {
    if (migration.version !== index + 1) throw new InternalError(`migration ${migration.name} must be number ${index + 1}`);
  });
}
