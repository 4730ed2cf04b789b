export { createServer, type OnceboxServer, type ServerOptions } from './server.js';
export { SqliteDedupeStore, type SqliteStoreOptions } from './sqlite-store.js';
export { PostgresDedupeStore, type PostgresStoreOptions } from './postgres-store.js';
export type { CompactionResult, DedupeStore, EventQuery, RetentionPolicy } from './store.js';
export { TokenRegistry, type TokenGrant, type TokenInfo, type TokenRequest, type TokenScope, type ReadTarget } from './tokens.js';
export { openDedupeStore, type StoreLocation } from './open-store.js';
