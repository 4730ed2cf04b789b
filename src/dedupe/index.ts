/**
 * `oncebox/server`: the deduplicating server and its stores.
 * @packageDocumentation
 * @module oncebox/server
 */
export { createServer, type OnceboxServer, type ServerOptions } from './server.js';
export { SqliteDedupeStore, type SqliteStoreOptions } from './sqlite/store.js';
export { PostgresDedupeStore, type PostgresStoreOptions } from './postgres/store.js';
export type { CompactionResult, DedupeStore, EventQuery, RetentionPolicy, StoreSizes } from './store.js';
export { EventSignal } from './event-signal.js';
export { TokenRegistry, type TokenGrant, type TokenInfo, type TokenRequest, type TokenScope, type ReadTarget, type TokenRow } from './tokens.js';
export type { CheckedItem, CheckedEvent, CheckedCheckpoint, InvalidItem, ItemSubject } from './item-check.js';
export { Catalog, type CatalogScope, type PageQuery } from './catalog/catalog.js';
export type { Durability } from '../sqlite/open.js';
export { openDedupeStore, type StoreLocation } from './open-store.js';
export type { LineagePolicy } from './ingest/lineage.js';
export type { AttemptClaim, ClaimDecision } from './attempt-claim.js';
export type { IngestScope } from './ingest/steps.js';
