import { nodeCommandFor } from './bundle.js';
import type { Publication } from './history.js';
import type { TestServer } from './test-server.js';

/**
 * The job under test: your program, run as a child process with `command`, once per attempt. It takes
 * everything it must know from its environment:
 * - `ONCEBOX_SERVER`, `ONCEBOX_TOKEN`: the test server (through its fault layer) and a publish token of
 *   `producer` (openOutbox and openConsumer read ONCEBOX_TOKEN themselves);
 * - `ONCEBOX_OUTBOX`: its outbox file (the same path on the same machine, a new one on a fresh machine);
 * - `ONCEBOX_RUN_ID`, `ONCEBOX_ATTEMPT`: the run and this attempt;
 * - `ONCEBOX_DATA`: a folder for its data writes, shared by every attempt (your storage, not the machine's);
 * - `ONCEBOX_FAILPOINT`: where oncebox's code kills or stops it; leave it alone.
 */
export interface JobUnderTest {
  /**
   * The command: a file (`.js`/`.mjs` runs with node; `.ts` is bundled once with esbuild when it is
   * installed, else runs with `node --import tsx`), or the whole command line as an array (a wrapper
   * script is fine: each attempt's whole process group is stopped, continued and killed).
   */
  command: string | readonly string[];
  /** The producer it publishes as (for a consumer, its group's producer: the group by default). */
  producer: string;
  /** The assets it publishes to. */
  assets: readonly string[];
  /** A consumer's: the assets it reads, which its token may read. */
  consumes?: readonly string[] | undefined;
  /**
   * Called on each fresh test server before the job runs: a consumer's input, published with
   * `server.publish(asset, partitionKeys)`. What it returns is added to the job's environment.
   */
  setup?: ((server: TestServer) => Promise<Record<string, string> | void>) | undefined;
  /** More environment for every attempt. */
  env?: Record<string, string> | undefined;
  /** The run id each attempt gets in ONCEBOX_RUN_ID. @defaultValue 'run-1' */
  runId?: string | undefined;
  /**
   * The stream whose checkpoints the checker reads at the end: the run's task, when the job gives one; for
   * a consumer `{ runId: GROUP }`. @defaultValue the run, without a task
   */
  stream?: { runId: string; task?: string | null | undefined } | undefined;
  /**
   * Maps each event before it is compared with a clean run's: for a payload that carries what differs
   * between two test servers by nature (the id of the event a consumer responded to), never by the job.
   * @defaultValue the event as it is
   */
  comparable?: ((event: Publication) => Publication) | undefined;
  /**
   * Maps each file of the data folder (its path under ONCEBOX_DATA, and its content) before it is
   * compared with a clean run's: cut out what differs between two runs by nature (a timestamp in a
   * report), or return undefined to leave the file out. Two clean runs that differ are refused before
   * any scenario runs, naming what differs.
   * @defaultValue the content as it is
   */
  comparableData?: ((path: string, content: Buffer) => string | Buffer | undefined) | undefined;
  /**
   * A consumer's effects kept in its own outbox file (written in `ctx.commit`, as oncebox asks): a SQL
   * query that lists them, one row per effect (`SELECT order_id FROM applied`). At the end of a scenario
   * whose attempts all ran on one machine, the kit runs it on that file and compares the rows, each with
   * how often it appears, with a clean run's: an effect applied twice, or lost, is reported
   * (`effect-differs`). After a lost machine the effects kept on it are gone with it, and are not compared.
   * @defaultValue no effects compared
   */
  effects?: string | undefined;
  /** How long one attempt may run before it counts as hung and is killed. @defaultValue 60000 */
  attemptTimeoutMs?: number | undefined;
  /** The test server's store: PostgreSQL (a URL and a schema prefix of the test's own), or SQLite. @defaultValue SQLite */
  postgres?: { url: string; schemaPrefix: string } | undefined;
}

/** @internal The executable and arguments of a job's command: a TypeScript file bundled (see nodeCommandFor). */
export async function commandLine(command: string | readonly string[]): Promise<[string, string[]]> {
  if (typeof command !== 'string') return [command[0]!, [...command.slice(1)]];
  return nodeCommandFor(command);
}
