import type { StoredEvent } from '../protocol/wire.js';

/** The body of `POST /api/v2/assets/events` for one oncebox event. */
export interface AssetEventBody {
  asset_id: number;
  partition_key?: string;
  extra: Record<string, unknown>;
}

/** Airflow's own limit on `partition_key` (its API answers 422 beyond it); oncebox takes longer keys. */
export const AIRFLOW_MAX_PARTITION_KEY = 250;

/** Why Airflow would refuse this event's partition key, in a sentence naming the limit and the fix; undefined when it would not. */
export function partitionKeyProblem(event: Pick<StoredEvent, 'partitionKey' | 'cursor' | 'key'>): string | undefined {
  const key = event.partitionKey;
  if (key === null) return undefined;
  const where = `the event at cursor ${event.cursor} (key ${event.key})`;
  if (key.length > AIRFLOW_MAX_PARTITION_KEY) {
    return `${where} has a partition key of ${key.length} characters, and Airflow takes at most ${AIRFLOW_MAX_PARTITION_KEY}; shorten the partition keys of the assets you forward to Airflow`;
  }
  if (!/\S/.test(key)) return `${where} has a partition key of white space only, which Airflow refuses; give it a partition key with a visible character`;
  return undefined;
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

/** An asset event as Airflow answers it (the fields the forwarder reads). */
export interface AirflowAssetEvent {
  id: number;
  asset_id: number;
  partition_key?: string | null;
  extra?: Record<string, unknown> | null;
  created_dagruns: { dag_id: string; run_id: string }[];
  timestamp: string;
}
