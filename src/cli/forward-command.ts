import { mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Command } from 'commander';
import { z } from 'zod';
import { openAirflowForwarder } from '../airflow/forwarder.js';
import { readAssetMap } from '../airflow/asset-map.js';
import type { AirflowCredentials } from '../airflow/airflow-client.js';
import { AirflowError, AirflowErrorCode } from '../airflow/errors.js';
import { FencedError } from '../protocol/errors.js';
import { clientToken, serverOption, Exit, exitsWith, stopSignal, wholeNumber, withTokenOptions } from './arguments.js';

export interface ForwardAirflowArgs {
  servers: string[];
  airflow: string;
  mapFile: string;
  db: string;
  group: string;
  token: string | undefined;
  credentialsFile: string | undefined;
  settleMs?: number | undefined;
  batchSize?: number | undefined;
  requestTimeoutMs?: number | undefined;
  clockSkewMs?: number | undefined;
  retryMaxDelayMs?: number | undefined;
  /** One JSON line per event even on a terminal. */
  json?: boolean | undefined;
  signal: AbortSignal;
}

interface ForwardFlags {
  server: string[];
  airflow: string;
  map: string;
  db: string;
  group: string;
  token?: string;
  tokenFile?: string;
  airflowCredentialsFile?: string;
  settleMs?: number;
  batchSize?: number;
  requestTimeoutMs?: number;
  clockSkewMs?: number;
  retryMaxDelayMs?: number;
  json?: boolean;
}

/** `oncebox forward airflow`. */
export function forwardCommand(program: Command): Command {
  const forward = program.command('forward').summary('forward events to another system (airflow)').description('Forwards oncebox events into another system, each exactly once.');
  const airflow = forward
    .command('airflow')
    .description(
      "Posts each event of the mapped assets to Airflow's REST API as an asset event, exactly once (looking first after any " +
        'lost answer), with its partition key, so that a partitioned DAG runs once per partition. Runs until stopped. ' +
        'An Airflow that does not answer, refuses the credentials, or lacks a mapped asset stops it at start (exit 1): run it under a ' +
        'supervisor (systemd, Kubernetes) that restarts it. Mid-run, an unanswered request is retried; a later forwarder of the group ' +
        'fences this one (exit 3).',
    )
    .addOption(serverOption('the oncebox server'))
    .requiredOption('--airflow <url>', "Airflow's API server, e.g. http://127.0.0.1:8080")
    .requiredOption('--map <file>', 'JSON: which oncebox asset goes to which Airflow asset (by name, or { "uri": … })')
    .option('--db <file>', "the forwarder's SQLite file: its cursor and forward receipts", '.oncebox/airflow-forwarder.db')
    .option('--group <name>', 'the consumer group: one live forwarder per group', 'airflow-forwarder')
    .option('--airflow-credentials-file <file>', 'JSON {"username","password"} or {"token"} (default: ONCEBOX_AIRFLOW_USERNAME and ONCEBOX_AIRFLOW_PASSWORD, or ONCEBOX_AIRFLOW_TOKEN)')
    .option('--batch-size <n>', 'events posted between two durable commits of their receipts (default: 20)', wholeNumber)
    .option('--settle-ms <ms>', 'after a lost answer, how long Airflow gets to commit before the lookup (default: 1000)', wholeNumber)
    .option('--request-timeout-ms <ms>', 'how long one request may take before its outcome counts as unknown (default: 10000)', wholeNumber)
    .option('--clock-skew-ms <ms>', "how far Airflow's clock may be behind the oncebox server's (default: 300000)", wholeNumber)
    .option('--retry-max-delay-ms <ms>', 'the longest pause between retries while Airflow gives no answer (default: 5000)', wholeNumber)
    .option('--json', 'one JSON line per event even on a terminal (it is JSON elsewhere)');
  withTokenOptions(airflow)
    .addHelpText(
      'after',
      `
Example:
  $ ONCEBOX_TOKEN=$(cat forwarder.token) ONCEBOX_AIRFLOW_USERNAME=admin ONCEBOX_AIRFLOW_PASSWORD=… \\
      oncebox forward airflow --server http://127.0.0.1:8787 --airflow http://127.0.0.1:8080 --map airflow-map.json
See docs/airflow.md.`,
    )
    .action(
      exitsWith((flags: ForwardFlags) => {
        mkdirSync(dirname(flags.db), { recursive: true });
        return runForwardAirflow({
          servers: flags.server,
          airflow: flags.airflow,
          mapFile: flags.map,
          db: flags.db,
          group: flags.group,
          token: clientToken(flags, 'forward'),
          credentialsFile: flags.airflowCredentialsFile,
          settleMs: flags.settleMs,
          batchSize: flags.batchSize,
          requestTimeoutMs: flags.requestTimeoutMs,
          clockSkewMs: flags.clockSkewMs,
          retryMaxDelayMs: flags.retryMaxDelayMs,
          json: flags.json,
          signal: stopSignal(),
        });
      }),
    );
  return forward;
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
    settleMs: args.settleMs,
    batchSize: args.batchSize,
    requestTimeoutMs: args.requestTimeoutMs,
    clockSkewMs: args.clockSkewMs,
    retryMaxDelayMs: args.retryMaxDelayMs,
  });
  const json = args.json === true || !process.stdout.isTTY;
  const assets = Object.fromEntries([...forwarder.resolvedAssets].map(([oncebox, asset]) => [oncebox, { id: asset.id, name: asset.name, uri: asset.uri }]));
  console.log(
    json
      ? JSON.stringify({ event: 'forwarding', group: args.group, epoch: forwarder.epoch, cursor: forwarder.cursor, assets })
      : `oncebox forward: group ${args.group} (epoch ${forwarder.epoch}) forwarding after cursor ${forwarder.cursor}: ` +
          Object.entries(assets).map(([oncebox, asset]) => `${oncebox} → ${asset.name} (${asset.uri})`).join(', '),
  );
  try {
    const result = await forwarder.run({
      signal: args.signal,
      onForwarded: (receipt) =>
        console.log(
          json
            ? JSON.stringify({
                event: 'forwarded',
                cursor: receipt.cursor,
                key: receipt.key,
                partitionKey: receipt.partitionKey,
                airflowEventId: receipt.airflowEventId,
                foundByLookup: receipt.foundByLookup,
              })
            : `#${receipt.cursor} ${receipt.asset} ${receipt.partitionKey ?? '-'} → Airflow event ${receipt.airflowEventId}${receipt.foundByLookup ? ' (found there: posted before its answer was lost)' : ''}`,
        ),
    });
    const cursor = forwarder.cursor;
    const closed = await forwarder.close();
    console.log(
      json
        ? JSON.stringify({ event: 'stopped', ...result, cursor, pending: closed.pending })
        : `oncebox forward: stopped at cursor ${cursor}: ${result.forwarded} forwarded (${result.found} found by lookup), ${result.lookups} lookups`,
    );
    return Exit.Ok;
  } catch (error) {
    await forwarder.close({ timeoutMs: 0 });
    if (error instanceof FencedError) {
      console.error(`oncebox forward: fenced: a later forwarder of group "${args.group}" took over (${error.message})`);
      return Exit.NeedsAttention;
    }
    throw error;
  }
}
