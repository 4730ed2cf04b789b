import type Database from 'better-sqlite3';
import { params, prepare, queryBuilder } from '../../sqlite/statements.js';
import type { RelayError } from '../events.js';
import type { RunContext } from '../run.js';
import type { OutboxSchema } from './schema.js';

/** What an outbox file keeps about itself, in its `meta` table, by name. */
export interface MetaValues {
  /** The producer the file belongs to; set once, when a job first opens it. */
  producer: string;
  /** The run of the job that last opened the file; null for a job outside any run. */
  run: RunContext | null;
  /** The relay's last delivery error, so that `oncebox status` can tell it after the relay is gone. */
  relay_last_error: RelayError;
  /** The server state a retry on a fresh machine resumed from. */
  resumed: { epoch: number; attempt: number; at: string };
}

interface Codec<T> {
  encode(value: T): string;
  decode(text: string): T;
}

const json = <T>(): Codec<T> => ({ encode: (value) => JSON.stringify(value), decode: (text) => JSON.parse(text) as T });

// The producer was stored as plain text before any other entry existed; it stays so.
const CODECS: { [K in keyof MetaValues]: Codec<MetaValues[K]> } = {
  producer: { encode: (value) => value, decode: (text) => text },
  run: json(),
  relay_last_error: json(),
  resumed: json(),
};

/** @internal The rows of `meta` as text, by name. */
export interface MetaRows {
  read(name: string): string | undefined;
  write(name: string, value: string): void;
  remove(name: string): void;
}

/** The `meta` table's own statements, prepared once per file. */
function metaRows(db: Database.Database): MetaRows {
  const q = queryBuilder<OutboxSchema>(db);
  const name = params<{ name: string }>();
  const entry = params<{ name: string; value: string }>();
  const get = prepare(db, name, q.selectFrom('meta').select('value').where('name', '=', name.name));
  const set = prepare(
    db,
    entry,
    q
      .insertInto('meta')
      .values({ name: entry.name, value: entry.value })
      .onConflict((oc) => oc.column('name').doUpdateSet({ value: entry.value })),
  );
  const remove = prepare(db, name, q.deleteFrom('meta').where('name', '=', name.name));
  return { read: (key) => get.get({ name: key })?.value, write: (key, value) => set.run({ name: key, value }), remove: (key) => remove.run({ name: key }) };
}

/** @internal Typed access to an outbox file's metadata: each entry is encoded and decoded in one place. */
export class FileMeta {
  private readonly rows: MetaRows;

  constructor(db: Database.Database) {
    this.rows = metaRows(db);
  }

  read<K extends keyof MetaValues>(name: K): MetaValues[K] | undefined {
    const text = this.rows.read(name);
    return text === undefined ? undefined : CODECS[name].decode(text);
  }

  write<K extends keyof MetaValues>(name: K, value: MetaValues[K]): void {
    this.rows.write(name, CODECS[name].encode(value));
  }

  remove(name: keyof MetaValues): void {
    this.rows.remove(name);
  }
}
