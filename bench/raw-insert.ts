import type pg from 'pg';

/**
 * The raw comparison's write, shared by the raw benchmark and the HTTP floor so both do the very same
 * work: a dedupe record keyed by UUID, as the PostgreSQL store keeps it, inserted first in one batched
 * statement.
 */
export async function createRawDedupeTable(db: pg.Pool | pg.Client, schema: string): Promise<void> {
  await db.query(
    `CREATE TABLE ${schema}.dedupe (key uuid PRIMARY KEY, fingerprint text NOT NULL, event_id uuid NOT NULL, ts text NOT NULL, created_at bigint NOT NULL)`,
  );
}

export async function rawInsert(db: pg.Pool | pg.Client, schema: string, keys: readonly string[]): Promise<void> {
  await db.query(
    `INSERT INTO ${schema}.dedupe SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::bigint[]) ON CONFLICT (key) DO NOTHING`,
    [keys, keys.map(() => 'fingerprint'), keys, keys.map(() => 'ts'), keys.map(() => 0)],
  );
}
