import type { Durability } from '../sqlite/open.js';
import { PostgresDedupeStore } from './postgres/store.js';
import { SqliteDedupeStore } from './sqlite/store.js';
import type { DedupeStore } from './store.js';
import type { LineagePolicy } from './ingest/lineage.js';

export interface StoreLocation {
  /** A SQLite file path, or a postgres:// URL. */
  db: string;
  /** The PostgreSQL schema of oncebox's tables. @defaultValue 'oncebox' */
  schema?: string | undefined;
  durability?: Durability;
  now?: (() => Date) | undefined;
  maxAttemptStep?: number;
  lineage?: LineagePolicy;
  staleRunAfterMs?: number | undefined;
  /** A SQLite store must exist already (a tool's, not a server's). */
  mustExist?: boolean;
}

export function isPostgresUrl(db: string): boolean {
  return /^postgres(ql)?:\/\//.test(db);
}

/** Opens (and migrates) the store a server, or `oncebox token`, works on. */
export async function openDedupeStore(location: StoreLocation): Promise<DedupeStore> {
  const { db, schema, durability, now, maxAttemptStep, lineage, mustExist, staleRunAfterMs } = location;
  return isPostgresUrl(db)
    ? PostgresDedupeStore.open({ connectionString: db, schema, now, maxAttemptStep, lineage, staleRunAfterMs })
    : new SqliteDedupeStore({ path: db, durability, now, maxAttemptStep, lineage, mustExist, staleRunAfterMs });
}
