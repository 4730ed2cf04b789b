import type pg from 'pg';
import { SchemaTooNewError } from '../../protocol/errors.js';
import { checkMigrationNumbers } from '../../sqlite/migrate.js';
import type { PostgresMigration } from './migrations.js';

/** A stable 64-bit advisory lock key per schema, so that stores in different schemas do not wait on each other. */
export function advisoryKey(schema: string, purpose: string): string {
  let hash = 1469598103934665603n;
  for (const char of `oncebox:${purpose}:${schema}`) hash = ((hash ^ BigInt(char.codePointAt(0)!)) * 1099511628211n) & 0x7fffffffffffffffn;
  return hash.toString();
}

/**
 * Brings the schema up to the newest migration. Server instances starting at once take turns on a
 * session advisory lock; each step runs in its own transaction and records itself first, and a schema
 * whose version is newer than this code knows is refused.
 * @internal
 */
export async function migratePostgres(pool: pg.Pool, schema: string, migrations: readonly PostgresMigration[]): Promise<void> {
  checkMigrationNumbers(migrations);
  const client = await pool.connect();
  const quoted = `"${schema.replaceAll('"', '""')}"`;
  try {
    await client.query('SELECT pg_advisory_lock($1)', [advisoryKey(schema, 'migrate')]);
    try {
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
      await client.query(`SET search_path TO ${quoted}`);
      await client.query('CREATE TABLE IF NOT EXISTS oncebox_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
      const { rows } = await client.query<{ version: number }>('SELECT coalesce(max(version), 0) AS version FROM oncebox_migrations');
      const current = rows[0]!.version;
      if (current > migrations.length) throw new SchemaTooNewError(`PostgreSQL schema "${schema}"`, current, migrations.length);
      for (const migration of migrations.slice(current)) {
        await client.query('BEGIN');
        try {
          await client.query('INSERT INTO oncebox_migrations (version, name) VALUES ($1, $2)', [migration.version, migration.name]);
          await client.query(migration.sql);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw error;
        }
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [advisoryKey(schema, 'migrate')]);
    }
  } finally {
    client.release();
  }
}
