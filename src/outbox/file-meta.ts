import type { RunContext } from './run.js';
import type { RelayError } from './relay-events.js';

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

/** @internal The rows of `meta` the file's statements read and write. */
export interface MetaRows {
  read(name: string): string | undefined;
  write(name: string, value: string): void;
}

/** @internal Typed access to an outbox file's metadata: each entry is encoded and decoded in one place. */
export class FileMeta {
  constructor(private readonly rows: MetaRows) {}

  read<K extends keyof MetaValues>(name: K): MetaValues[K] | undefined {
    const text = this.rows.read(name);
    return text === undefined ? undefined : CODECS[name].decode(text);
  }

  write<K extends keyof MetaValues>(name: K, value: MetaValues[K]): void {
    this.rows.write(name, CODECS[name].encode(value));
  }
}
