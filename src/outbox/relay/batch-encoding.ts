import type { StreamIdentity } from '../../protocol/wire.js';
import type { OutboxRow } from '../file/schema.js';
import { encodeRunKeys, RUN_KEYS_HEADER } from '../../protocol/run-keys.js';

/**
 * The JSON body of `POST /v1/emissions` for a batch of rows. `extra` is stored as JSON text already, so
 * it is spliced in as it is rather than parsed and serialised again for every row of every batch.
 * @internal
 */
export function encodeBatch(stream: StreamIdentity, rows: readonly OutboxRow[]): string {
  const items = rows.map((row) => {
    if (row.kind === 'checkpoint') {
      const revision = row.revision === 0 ? '' : `,"revision":${row.revision}`;
      return `{"seq":${row.seq},"key":"${row.key}","kind":"checkpoint","name":${JSON.stringify(row.checkpoint_name)},"value":${row.checkpoint_value}${revision}}`;
    }
    const head = JSON.stringify({
      seq: row.seq,
      key: row.key,
      kind: row.kind,
      asset: row.asset,
      ...(row.partition_key === null ? {} : { partitionKey: row.partition_key }),
      ...(row.partition_date === null ? {} : { partitionDate: row.partition_date }),
      ...(row.cause_cursor === null ? {} : { cause: { cursor: row.cause_cursor } }),
    });
    const traced = row.trace_context === null ? head : `${head.slice(0, -1)},"trace":${row.trace_context}}`;
    return row.extra === null ? traced : `${traced.slice(0, -1)},"extra":${row.extra}}`;
  });
  return `{"stream":${JSON.stringify(stream)},"items":[${items.join(',')}]}`;
}

/**
 * The headers that go with a batch's body: which of its rows carry keys of their run alone. A key derived
 * from a partition key comes from this run alone (keys.ts deriveKey), so the server may file it beside the
 * run's other keys; explicit, caused and position keys stay the producer's.
 * @internal
 */
export function batchHeaders(rows: readonly OutboxRow[]): Record<string, string> {
  const runKeys = encodeRunKeys(rows.flatMap((row, position) => (row.kind === 'event' && row.key_scope === 'partition' ? [position] : [])));
  return runKeys === undefined ? {} : { [RUN_KEYS_HEADER]: runKeys };
}
