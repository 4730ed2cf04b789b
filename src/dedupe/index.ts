export { createServer, type OnceboxServer, type ServerOptions } from './server.js';
export { SqliteDedupeStore, type SqliteStoreOptions } from './sqlite-store.js';
export { PostgresDedupeStore, type PostgresStoreOptions } from './postgres-store.js';
export type { CompactionResult, DedupeStore, EventQuery, RetentionPolicy } from './store.js';
