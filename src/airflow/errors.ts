import { OnceboxError } from '../protocol/errors.js';

/** Codes of the errors the Airflow forwarder raises: each names a cause the user must act on. */
export const AirflowErrorCode = {
  /** No answer from Airflow (refused, reset, timed out), or a 5xx, while the forwarder could not go on without one. */
  Unreachable: 'airflow_unreachable',
  /** Airflow's token endpoint refused the credentials, or a renewed token was refused too. */
  Credentials: 'airflow_credentials',
  /** The credentials are good but may not do what the forwarder needs (read assets, post asset events). */
  Forbidden: 'airflow_forbidden',
  /** The map names an Airflow asset that Airflow does not have. */
  UnknownAsset: 'airflow_unknown_asset',
  /** The map file cannot be read or does not have the expected shape. */
  InvalidMap: 'airflow_invalid_map',
  /** Airflow refused an asset event for good (a 4xx other than 401): the event was not forwarded. */
  Rejected: 'airflow_rejected',
} as const;
export type AirflowErrorCode = (typeof AirflowErrorCode)[keyof typeof AirflowErrorCode];

/** Something between the forwarder and Airflow that the user must act on; `code` says what. */
export class AirflowError extends OnceboxError {
  /** For a map error: the map entry at fault ("batch_ready.name"). */
  readonly field: string | undefined;
  constructor(
    code: AirflowErrorCode,
    message: string,
    options?: { cause?: unknown; field?: string },
  ) {
    super(code, message, options);
    this.field = options?.field;
  }
}
