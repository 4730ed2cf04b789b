import type Database from 'better-sqlite3';

/** What the forwarder records for each event it got into Airflow, in the transaction that moves its cursor. */
export interface ForwardReceipt {
  eventId: string;
  cursor: number;
  /** The oncebox key, which the Airflow event carries in `extra.oncebox.key`. */
  key: string;
  asset: string;
  partitionKey: string | null;
  airflowAssetId: number;
  /** The id of the one AssetEvent Airflow holds for this oncebox event. */
  airflowEventId: number;
  /** The DAG runs Airflow named in its answer (it usually creates them later, in the scheduler). */
  createdDagruns: { dagId: string; runId: string }[];
  /** True when a lookup found the event in Airflow, posted by a try whose answer was lost. */
  foundByLookup: boolean;
  forwardedAt: string;
}

/** @internal */
export interface ForwardStatements {
  record(receipt: ForwardReceipt): void;
  count(): number;
  all(): ForwardReceipt[];
}

interface ReceiptRow {
  event_id: string;
  cursor: number;
  oncebox_key: string;
  asset: string;
  partition_key: string | null;
  airflow_asset_id: number;
  airflow_event_id: number;
  created_dagruns: string;
  found_by_lookup: number;
  forwarded_at: string;
}

/**
 * The receipts table lives in the forwarder's consumer file beside the consumer's own tables, like any
 * consumer's effect; the primary key makes a second receipt for one event an error, not a silent copy.
 * @internal
 */
export function forwardStatements(db: Database.Database): ForwardStatements {
  db.exec(`CREATE TABLE IF NOT EXISTS airflow_forwards (
    event_id TEXT PRIMARY KEY,
    cursor INTEGER NOT NULL,
    oncebox_key TEXT NOT NULL,
    asset TEXT NOT NULL,
    partition_key TEXT,
    airflow_asset_id INTEGER NOT NULL,
    airflow_event_id INTEGER NOT NULL,
    created_dagruns TEXT NOT NULL,
    found_by_lookup INTEGER NOT NULL,
    forwarded_at TEXT NOT NULL
  ) STRICT`);
  const insert = db.prepare(
    `INSERT INTO airflow_forwards VALUES (@event_id, @cursor, @oncebox_key, @asset, @partition_key, @airflow_asset_id, @airflow_event_id, @created_dagruns, @found_by_lookup, @forwarded_at)`,
  );
  const count = db.prepare('SELECT count(*) AS n FROM airflow_forwards').pluck();
  const all = db.prepare('SELECT * FROM airflow_forwards ORDER BY cursor');
  return {
    record: (receipt) =>
      insert.run({
        event_id: receipt.eventId,
        cursor: receipt.cursor,
        oncebox_key: receipt.key,
        asset: receipt.asset,
        partition_key: receipt.partitionKey,
        airflow_asset_id: receipt.airflowAssetId,
        airflow_event_id: receipt.airflowEventId,
        created_dagruns: JSON.stringify(receipt.createdDagruns),
        found_by_lookup: receipt.foundByLookup ? 1 : 0,
        forwarded_at: receipt.forwardedAt,
      }),
    count: () => count.get() as number,
    all: () =>
      (all.all() as ReceiptRow[]).map((row) => ({
        eventId: row.event_id,
        cursor: row.cursor,
        key: row.oncebox_key,
        asset: row.asset,
        partitionKey: row.partition_key,
        airflowAssetId: row.airflow_asset_id,
        airflowEventId: row.airflow_event_id,
        createdDagruns: JSON.parse(row.created_dagruns) as ForwardReceipt['createdDagruns'],
        foundByLookup: row.found_by_lookup === 1,
        forwardedAt: row.forwarded_at,
      })),
  };
}
