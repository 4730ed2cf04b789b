/**
 * `oncebox/airflow`: the Airflow forwarder: each oncebox event as one Airflow asset event.
 * @packageDocumentation
 * @module oncebox/airflow
 */
export {
  openAirflowForwarder,
  AirflowForwarder,
  type AirflowForwarderOptions,
  type ForwardRunResult,
  type ForwarderStatus,
} from './forwarder.js';
export { assetEventBody, forwardedKey, type AssetEventBody } from './event-body.js';
export { readAssetMap, parseAssetMap, type AirflowAssetMap, type AirflowAssetRef } from './asset-map.js';
export type { AirflowCredentials, AirflowAsset, AirflowAssetEvent } from './airflow-client.js';
export type { ForwardReceipt } from './receipts.js';
export { AirflowError, AirflowErrorCode } from './errors.js';
export { FencedError, OnceboxError } from '../protocol/errors.js';
