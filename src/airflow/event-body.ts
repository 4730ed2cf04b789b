import type { StoredEvent } from '../protocol/wire.js';
import type { AirflowAssetEvent } from './airflow-client.js';

/** The body of `POST /api/v2/assets/events` for one oncebox event. */
export interface AssetEventBody {
  asset_id: number;
  partition_key?: string;
  extra: Record<string, unknown>;
}

/**
 * The Airflow asset event for an oncebox event: its partition key, its own `extra` as is (so that a
 * downstream DAG reads it where it would read any asset event's), and under `extra.oncebox` the key the
 * forwarder's lookup matches on, with the event's id and provenance. An `oncebox` field of the event's
 * own extra is overwritten.
 */
export function assetEventBody(event: StoredEvent, assetId: number): AssetEventBody {
  return {
    asset_id: assetId,
    ...(event.partitionKey === null ? {} : { partition_key: event.partitionKey }),
    extra: {
      ...(event.extra ?? {}),
      oncebox: {
        key: event.key,
        eventId: event.eventId,
        asset: event.asset,
        cursor: event.cursor,
        producer: event.producer,
        workflow: event.workflow,
        runId: event.runId,
        task: event.task,
        attempt: event.attempt,
        timestamp: event.timestamp,
      },
    },
  };
}

/** The oncebox key a forwarded Airflow event carries in its `extra`; undefined for any other event. */
export function forwardedKey(event: Pick<AirflowAssetEvent, 'extra'>): string | undefined {
  const oncebox = event.extra?.oncebox;
  if (typeof oncebox !== 'object' || oncebox === null) return undefined;
  const key = (oncebox as Record<string, unknown>).key;
  return typeof key === 'string' ? key : undefined;
}
