import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { openAirflowForwarder } from '../airflow/forwarder.js';
import { readAssetMap } from '../airflow/asset-map.js';
import type { AirflowCredentials } from '../airflow/airflow-client.js';
import { AirflowError, AirflowErrorCode } from '../airflow/errors.js';
import { FencedError } from '../protocol/errors.js';

export interface ForwardAirflowArgs {
  servers: string[];
  airflow: string;
  mapFile: string;
  db: string;
  group: string;
  token: string | undefined;
  credentialsFile: string | undefined;
  settleMs: number | undefined;
  batchSize: number | undefined;
  signal: AbortSignal;
}

const credentialsFile = z.union([
  z.strictObject({ username: z.string().min(1), password: z.string().min(1) }),
  z.strictObject({ token: z.string().min(1) }),
]);

/**
 * Airflow credentials from a file or the environment, never from a flag that `ps` shows:
 * --airflow-credentials-file (JSON: username and password, or token), else ONCEBOX_AIRFLOW_USERNAME
 * with ONCEBOX_AIRFLOW_PASSWORD, else ONCEBOX_AIRFLOW_TOKEN.
 */
export function airflowCredentials(file: string | undefined, env: NodeJS.ProcessEnv = process.env): AirflowCredentials {
  if (file !== undefined) {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(file, 'utf8'));
    } catch (error) {
      throw new AirflowError(AirflowErrorCode.Credentials, `--airflow-credentials-file ${file} cannot be read as JSON: ${(error as Error).message}`);
    }
    const parsed = credentialsFile.safeParse(json);
    if (!parsed.success) {
      throw new AirflowError(AirflowErrorCode.Credentials, `--airflow-credentials-file ${file} must hold {"username": "…", "password": "…"} or {"token": "…"}`);
    }
    return parsed.data;
  }
  const { ONCEBOX_AIRFLOW_USERNAME: username, ONCEBOX_AIRFLOW_PASSWORD: password, ONCEBOX_AIRFLOW_TOKEN: token } = env;
  if (username && password) return { username, password };
  if (token) return { token };
  throw new AirflowError(
    AirflowErrorCode.Credentials,
    'no Airflow credentials: set ONCEBOX_AIRFLOW_USERNAME and ONCEBOX_AIRFLOW_PASSWORD (or ONCEBOX_AIRFLOW_TOKEN), or pass --airflow-credentials-file FILE',
  );
}

/** `oncebox forward airflow`: runs the forwarder until SIGTERM, one JSON line per event forwarded. */
export async function runForwardAirflow(args: ForwardAirflowArgs): Promise<number> {
  const forwarder = await openAirflowForwarder({
    path: args.db,
    server: args.servers.length === 1 ? args.servers[0]! : args.servers,
    airflow: args.airflow,
    credentials: airflowCredentials(args.credentialsFile),
    map: readAssetMap(args.mapFile),
    group: args.group,
    token: args.token,
    ...(args.settleMs === undefined ? {} : { settleMs: args.settleMs }),
    ...(args.batchSize === undefined ? {} : { batchSize: args.batchSize }),
  });
  const assets = Object.fromEntries([...forwarder.resolvedAssets].map(([oncebox, asset]) => [oncebox, { id: asset.id, name: asset.name, uri: asset.uri }]));
  console.log(JSON.stringify({ event: 'forwarding', group: args.group, epoch: forwarder.epoch, cursor: forwarder.cursor, assets }));
  try {
    const result = await forwarder.run({
      signal: args.signal,
      onForwarded: (receipt) =>
        console.log(
          JSON.stringify({
            event: 'forwarded',
            cursor: receipt.cursor,
            key: receipt.key,
            partitionKey: receipt.partitionKey,
            airflowEventId: receipt.airflowEventId,
            foundByLookup: receipt.foundByLookup,
          }),
        ),
    });
    const cursor = forwarder.cursor;
    const closed = await forwarder.close();
    console.log(JSON.stringify({ event: 'stopped', ...result, cursor, pending: closed.pending }));
    return 0;
  } catch (error) {
    await forwarder.close({ timeoutMs: 0 });
    if (error instanceof FencedError) {
      console.error(`oncebox forward: fenced: a later forwarder of group "${args.group}" took over (${error.message})`);
      return 3;
    }
    throw error;
  }
}
