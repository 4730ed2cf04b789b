/**
 * A real Apache Airflow 3 for oncebox's Airflow tests, demo and benchmark: installed by
 * airflow/install.sh into .airflow/venv from the pinned airflow/requirements.txt, run as its own API
 * server, scheduler (LocalExecutor) and DAG processor, on a PostgreSQL database of its own, with the DAGs
 * in airflow/dags. Nothing here is part of the package.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

export const REPO = fileURLToPath(new URL('../..', import.meta.url));
const VENV = join(REPO, '.airflow', 'venv');
const AIRFLOW_BIN = join(VENV, 'bin', 'airflow');

/** Whether airflow/install.sh has installed Airflow here. */
export function airflowInstalled(): boolean {
  return existsSync(AIRFLOW_BIN) && existsSync(join(VENV, '.oncebox-requirements'));
}

/** Runs airflow/install.sh (which does nothing when the pins are installed already), its progress lines on stderr. */
export async function installAirflow(): Promise<void> {
  const child = spawn('bash', [join(REPO, 'airflow', 'install.sh')], { stdio: ['ignore', 'inherit', 'inherit'] });
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`airflow/install.sh failed (exit ${code}); see its output above`);
}

export interface AirflowOptions {
  /** Names the database (oncebox_airflow_NAME, created afresh) and the home directory. */
  name: string;
  /** Where AIRFLOW_HOME and its logs go. */
  dir: string;
  /** Seen by the DAGs' tasks: ONCEBOX_SERVER, ONCEBOX_DATA and the like. */
  taskEnv?: Record<string, string>;
  /** Lifetime of the REST API's tokens, to exercise the forwarder's renewal. @defaultValue 3600 */
  tokenLifetimeSeconds?: number;
  /** A PostgreSQL URL to create Airflow's database beside. @defaultValue ONCEBOX_TEST_PG or the local one */
  postgres?: string;
}

export interface RunningAirflow {
  url: string;
  username: string;
  password: string;
  home: string;
  /** A REST client signed in as that user, for the tests' own reads and triggers. */
  admin: AirflowAdmin;
  stop(): Promise<void>;
}

const USERNAME = 'oncebox';

/** Starts Airflow and waits until its scheduler and DAG processor are healthy and the oncebox DAGs are parsed. */
export async function startAirflow(options: AirflowOptions): Promise<RunningAirflow> {
  const home = join(options.dir, `airflow-${options.name}`);
  mkdirSync(home, { recursive: true });
  const password = `pw-${Math.random().toString(36).slice(2)}`;
  writeFileSync(join(home, 'passwords.json'), JSON.stringify({ [USERNAME]: password }));
  const database = `oncebox_airflow_${options.name}`.replace(/[^a-z0-9_]/g, '_');
  const pgUrl = new URL(options.postgres ?? process.env.ONCEBOX_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test');
  await recreateDatabase(pgUrl, database);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const airflowDb = new URL(pgUrl.href);
  airflowDb.protocol = 'postgresql+psycopg2:';
  airflowDb.pathname = `/${database}`;
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    ...options.taskEnv,
    AIRFLOW_HOME: home,
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: airflowDb.href,
    AIRFLOW__CORE__EXECUTOR: 'LocalExecutor',
    // Small pools: the tests' PostgreSQL serves two Airflows and the other tests at once.
    AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE: '2',
    AIRFLOW__DATABASE__SQL_ALCHEMY_MAX_OVERFLOW: '4',
    AIRFLOW__CORE__PARALLELISM: '4',
    AIRFLOW__CORE__LOAD_EXAMPLES: 'False',
    AIRFLOW__CORE__DAGS_FOLDER: join(REPO, 'airflow', 'dags'),
    AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION: 'False',
    AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS: `${USERNAME}:admin`,
    AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE: join(home, 'passwords.json'),
    AIRFLOW__CORE__EXECUTION_API_SERVER_URL: `${url}/execution/`,
    AIRFLOW__API__PORT: String(port),
    AIRFLOW__API__HOST: '127.0.0.1',
    AIRFLOW__API__WORKERS: '1',
    AIRFLOW__API_AUTH__JWT_SECRET: `oncebox-test-${Math.random().toString(36).slice(2)}-${Date.now()}`,
    AIRFLOW__API_AUTH__JWT_EXPIRATION_TIME: String(options.tokenLifetimeSeconds ?? 3600),
    AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL: '5',
    AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC: '1',
    AIRFLOW__LOGGING__LOGGING_LEVEL: 'INFO',
    PYTHONUNBUFFERED: '1',
  };
  delete env.AIRFLOW_CONFIG;
  await run([AIRFLOW_BIN, 'db', 'migrate'], env, home, 'db-migrate');
  const processes = [
    daemon([AIRFLOW_BIN, 'api-server', '--port', String(port), '--host', '127.0.0.1'], env, home, 'api-server'),
    daemon([AIRFLOW_BIN, 'scheduler'], env, home, 'scheduler'),
    daemon([AIRFLOW_BIN, 'dag-processor'], env, home, 'dag-processor'),
  ];
  // Each process leads a group of the workers it forked; the whole group goes, even once its leader has.
  const killAll = () => {
    for (const child of processes) signalGroup(child, 'SIGKILL');
  };
  process.once('exit', killAll);
  const stop = async () => {
    for (const child of processes) signalGroup(child, 'SIGTERM');
    await sleep(1000);
    killAll();
    process.off('exit', killAll);
  };
  try {
    const admin = new AirflowAdmin(url, USERNAME, password);
    await admin.waitHealthy(120_000);
    await admin.waitForDags(['oncebox_ingest', 'oncebox_partition_consumer', 'plain_partition_consumer'], 120_000);
    return { url, username: USERNAME, password, home, admin, stop };
  } catch (error) {
    await stop();
    throw new Error(`Airflow did not come up: ${(error as Error).message}; see the logs in ${home}`, { cause: error });
  }
}

export interface DagRun {
  dag_run_id: string;
  state: string;
  partition_key?: string | null;
  run_type: string;
}

export interface TaskInstance {
  task_id: string;
  try_number: number;
  state: string | null;
}

/** The tests' and the demo's own view of Airflow, through its REST API. */
export class AirflowAdmin {
  private token: string | undefined;

  constructor(
    readonly url: string,
    private readonly username: string,
    private readonly password: string,
  ) {}

  async get<T>(path: string): Promise<T> {
    return this.call<T>('GET', path);
  }

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    // A token Airflow no longer takes (expired, or signed before a restart) is renewed once per call,
    // whichever attempt meets it: a retried read may meet it after a reset connection or a 500.
    let renewed = false;
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await fetch(`${this.url}/${path}`, {
          method,
          headers: { authorization: `Bearer ${await this.bearer()}`, 'content-type': 'application/json' },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(30_000),
        });
      } catch (error) {
        // A kept-alive connection the API server closed as the request went out (ECONNRESET): a read is
        // sent again, like the 500s below; a write is not, since it may have been taken.
        if (method === 'GET' && attempt < 5) {
          await new Promise((resolve) => setTimeout(resolve, 500 * (attempt + 1)));
          continue;
        }
        throw error;
      }
      if (response.status === 401 && !renewed) {
        renewed = true;
        this.token = undefined;
        continue;
      }
      const text = await response.text();
      // Airflow's API server answers a read now and then with a 500 under load (a database connection
      // recycled mid-request): the harness's own reads are retried a few times, with a pause.
      if (response.status >= 500 && method === 'GET' && attempt < 5) {
        await new Promise((resolve) => setTimeout(resolve, 500 * (attempt + 1)));
        continue;
      }
      if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text.slice(0, 400)}`);
      return JSON.parse(text) as T;
    }
  }

  async assetId(name: string): Promise<number> {
    const page = await this.get<{ assets: { id: number; name: string }[] }>(`api/v2/assets?name_pattern=${encodeURIComponent(name)}`);
    const asset = page.assets.find((candidate) => candidate.name === name);
    if (!asset) throw new Error(`Airflow has no asset named ${name}`);
    return asset.id;
  }

  /** Every event of an asset, oldest first. */
  async assetEvents(assetId: number): Promise<{ id: number; partition_key: string | null; extra: Record<string, unknown> | null }[]> {
    const all = [];
    for (let offset = 0; ; offset += 100) {
      const page = await this.get<{ asset_events: { id: number; partition_key: string | null; extra: Record<string, unknown> | null }[] }>(
        `api/v2/assets/events?asset_id=${assetId}&order_by=timestamp&limit=100&offset=${offset}`,
      );
      all.push(...page.asset_events);
      if (page.asset_events.length < 100) return all;
    }
  }

  async dagRuns(dagId: string): Promise<DagRun[]> {
    const all: DagRun[] = [];
    for (let offset = 0; ; offset += 100) {
      const page = await this.get<{ dag_runs: DagRun[] }>(`api/v2/dags/${dagId}/dagRuns?limit=100&offset=${offset}&order_by=id`);
      all.push(...page.dag_runs);
      if (page.dag_runs.length < 100) return all;
    }
  }

  async taskInstances(dagId: string, runId: string): Promise<TaskInstance[]> {
    const page = await this.get<{ task_instances: TaskInstance[] }>(`api/v2/dags/${dagId}/dagRuns/${encodeURIComponent(runId)}/taskInstances`);
    return page.task_instances;
  }

  async trigger(dagId: string, runId: string, conf: Record<string, unknown>): Promise<void> {
    await this.call('POST', `api/v2/dags/${dagId}/dagRuns`, { dag_run_id: runId, logical_date: null, conf });
  }

  /** Waits until a DAG run is in a final state, and returns it. */
  async waitForRun(dagId: string, runId: string, timeoutMs: number): Promise<DagRun> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const run = await this.get<DagRun>(`api/v2/dags/${dagId}/dagRuns/${encodeURIComponent(runId)}`);
      if (run.state === 'success' || run.state === 'failed') return run;
      if (Date.now() > deadline) throw new Error(`DAG run ${dagId}/${runId} still ${run.state} after ${timeoutMs} ms`);
      await sleep(1000);
    }
  }

  /** Waits until `check` holds, polling; returns its last value. */
  async until<T>(what: string, read: () => Promise<T>, check: (value: T) => boolean, timeoutMs: number): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await read();
      if (check(value)) return value;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(value).slice(0, 500)}`);
      await sleep(1000);
    }
  }

  async waitHealthy(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = 'no answer';
    while (Date.now() < deadline) {
      try {
        const response = await fetch(`${this.url}/api/v2/monitor/health`, { signal: AbortSignal.timeout(5000) });
        const health = (await response.json()) as Record<string, { status: string | null }>;
        last = JSON.stringify(health);
        if (health.scheduler?.status === 'healthy' && health.dag_processor?.status === 'healthy') return;
      } catch (error) {
        last = (error as Error).message;
      }
      await sleep(1000);
    }
    throw new Error(`not healthy after ${timeoutMs} ms: ${last}`);
  }

  async waitForDags(dagIds: string[], timeoutMs: number): Promise<void> {
    for (const dagId of dagIds) {
      await this.until(
        `DAG ${dagId} to be parsed`,
        () => this.get<{ dags: { dag_id: string; is_paused: boolean }[] }>(`api/v2/dags?dag_id_pattern=${dagId}`),
        (page) => page.dags.some((dag) => dag.dag_id === dagId && !dag.is_paused),
        timeoutMs,
      );
    }
  }

  private async bearer(): Promise<string> {
    if (this.token) return this.token;
    const response = await fetch(`${this.url}/auth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: this.username, password: this.password }),
    });
    if (!response.ok) throw new Error(`sign-in failed: ${response.status} ${await response.text()}`);
    this.token = ((await response.json()) as { access_token: string }).access_token;
    return this.token;
  }
}

async function recreateDatabase(pgUrl: URL, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: pgUrl.href });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await client.query(`CREATE DATABASE "${database}"`);
  } finally {
    await client.end();
  }
}

/** A port on loopback that nothing listens on (at the moment of asking). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function logFile(home: string, name: string) {
  return join(home, `${name}.log`);
}

async function run(command: string[], env: Record<string, string>, home: string, name: string): Promise<void> {
  const child = daemon(command, env, home, name);
  child.ref();
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`${command.slice(1).join(' ')} failed (exit ${code}); see ${logFile(home, name)}`);
}

/** A process in a group of its own, so that stopping it stops the workers it forked too; its output goes to a log file. */
function daemon(command: string[], env: Record<string, string>, home: string, name: string): ChildProcess {
  const out = openSync(logFile(home, name), 'a');
  const child = spawn(command[0]!, command.slice(1), { env, cwd: home, stdio: ['ignore', out, out], detached: true });
  child.unref();
  return child;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Gone already.
  }
}
