export { createServer, type OnceboxServer, type ServerOptions } from './server.js';
export { SqliteDedupeStore, type SqliteStoreOptions } from './sqlite-store.js';
export type { DedupeStore, EventQuery } from './store.js';
