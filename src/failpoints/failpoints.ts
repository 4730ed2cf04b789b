import { writeSync } from 'node:fs';

/**
 * Named crash and stall points for the crash tests and the testing kit (`oncebox/testing`).
 * `ONCEBOX_FAILPOINT=commit:after-write@3` kills this process with SIGKILL the third time it reaches
 * `commit:after-write`; `bullmq:before-claim@1:stall=3000` instead blocks its event loop for 3 seconds the
 * first time (a GC pause, a busy sibling job: no timer, lock renewal or socket is served meanwhile), after
 * printing `{"failpoint":…,"stall":3000}` on stdout; `…:stop` prints `{"failpoint":…,"stop":true}` and stops
 * the process with SIGSTOP, for whoever started it to continue (SIGCONT) when it chooses: a zombie paused
 * at an exact point; `commit:after-write@2:throw=SQLITE_FULL` throws, the second time, the error SQLite
 * throws when the disk is full (`SQLITE_BUSY`: when another process holds the file too long), inside the
 * commit's transaction, so that the commit is rolled back and `box.commit()` throws it as a real one would
 * (the testing kit's commit errors). Before a kill it prints `{"failpoint":…,"kill":true}`, so that whoever
 * started the process knows it died there (and not of something else). Several points are separated by commas.
 * `ONCEBOX_FAILPOINT=trace` kills nothing: it counts the points passed, and prints
 * `{"failpointHits":{…}}` as the process exits (the testing kit learns from a clean run how often a
 * job reaches each point). With the variable unset (always, outside tests) a failpoint is one comparison.
 *
 * - `commit:before`: `box.commit()` was called (the job's data write for the batch is done); nothing of
 *   the commit is written.
 * - `commit:after-write`: inside the commit's SQLite transaction, every row written, not yet committed.
 * - `terminal:after-write`: inside a terminal commit's transaction (`complete`, `fail`), its work done:
 *   nothing of it is committed yet.
 * - `commit:after-commit`: the commit is durable; the relay has not been woken.
 * - `relay:after-response`: the server has stored the batch and answered; no receipt is recorded yet (a
 *   throw there is a full disk as the relay records the answers: they are sent again).
 * - `consume:before-handler`: a consumer fetched events and is about to hand them to its handler.
 * - `consume:after-commit`: a consumer committed an event's effect and cursor; the relay may be delivering.
 * - `forward:before-post`: the Airflow forwarder is about to post an event it found no trace of.
 * - `forward:after-post`: Airflow committed a forwarded event and answered; its receipt is not yet committed.
 * - `bullmq:before-claim`: BullMQ handed a job to the adapter, which has not claimed its attempt yet.
 * - `bullmq:after-claim`: the adapter claimed the job's attempt and opened its outbox; the processor has not run.
 * - `bullmq:before-complete`: the processor returned; the adapter has not made the terminal commit.
 * - `bullmq:after-terminal`: the terminal commit is made and delivered; BullMQ has not heard of the end.
 * - `ingest:after-commit`: the server's store committed a group of requests (one transaction, one
 *   fsync); none of them is answered yet.
 * - `ingest:after-shared-commit`: the same, reached only by a commit that several requests shared.
 * @internal
 */
export type FailpointName =
  | 'commit:before'
  | 'commit:after-write'
  | 'terminal:after-write'
  | 'commit:after-commit'
  | 'relay:after-response'
  | 'consume:before-handler'
  | 'consume:after-commit'
  | 'forward:before-post'
  | 'forward:after-post'
  | 'bullmq:before-claim'
  | 'bullmq:after-claim'
  | 'bullmq:before-complete'
  | 'bullmq:after-terminal'
  | 'ingest:after-commit'
  | 'ingest:after-shared-commit';

interface Armed {
  name: string;
  hit: number;
  /** Milliseconds to block for, instead of the kill. */
  stallMs: number | undefined;
  /** Stop with SIGSTOP instead of the kill. */
  stop: boolean;
  /** Throw the error SQLite throws with this code instead of the kill. */
  throws: SqliteErrorCode | undefined;
}

/** The errors a commit can meet from SQLite that a failpoint can throw, with SQLite's own messages. */
const SQLITE_ERRORS = { SQLITE_FULL: 'database or disk is full', SQLITE_BUSY: 'database is locked' } as const;
export type SqliteErrorCode = keyof typeof SQLITE_ERRORS;

const tracing = process.env.ONCEBOX_FAILPOINT === 'trace';
const armed = tracing ? [] : parse(process.env.ONCEBOX_FAILPOINT);
const hits = new Map<string, number>();
if (tracing) {
  // Written synchronously on exit: the process may be ending by process.exit().
  process.on('exit', () => notify({ failpointHits: Object.fromEntries(hits) }));
}

export function failpoint(name: FailpointName): void {
  if (armed.length === 0 && !tracing) return;
  const hit = (hits.get(name) ?? 0) + 1;
  hits.set(name, hit);
  for (const point of armed) {
    if (point.name !== name || point.hit !== hit) continue;
    const { stallMs } = point;
    if (point.throws !== undefined) {
      notify({ failpoint: name, hit, throw: point.throws });
      // Shaped as better-sqlite3's SqliteError: a message and a `code`.
      throw Object.assign(new Error(SQLITE_ERRORS[point.throws]), { name: 'SqliteError', code: point.throws });
    }
    if (point.stop) {
      // Written synchronously, so that whoever waits for the notice sees it before the process stops.
      notify({ failpoint: name, hit, stop: true });
      process.kill(process.pid, 'SIGSTOP');
      continue;
    }
    if (stallMs === undefined) {
      notify({ failpoint: name, hit, kill: true });
      process.kill(process.pid, 'SIGKILL');
      continue;
    }
    process.stdout.write(`${JSON.stringify({ failpoint: name, hit, stall: stallMs })}\n`);
    const until = Date.now() + stallMs;
    while (Date.now() < until) {
      // Busy on purpose: the event loop serves nothing meanwhile.
    }
  }
}

/**
 * A notice on stdout, written synchronously so that whoever watches sees it before the process stops or
 * dies. A stdout nobody reads (closed, a broken pipe) must not keep the failpoint from doing its work.
 */
function notify(notice: object): void {
  try {
    writeSync(1, `${JSON.stringify(notice)}\n`);
  } catch {
    // Nobody is listening: the kill or stop still happens.
  }
}

function parse(spec: string | undefined): Armed[] {
  if (!spec) return [];
  return spec.split(',').map((one) => {
    const stop = one.endsWith(':stop');
    const [thrown, code] = (stop ? one.slice(0, -':stop'.length) : one).split(':throw=');
    if (code !== undefined && !(code in SQLITE_ERRORS)) throw new Error(`ONCEBOX_FAILPOINT: ${code} is not one of ${Object.keys(SQLITE_ERRORS).join(', ')}`);
    const [where, action] = thrown!.split(':stall=');
    const [name, hit] = where!.split('@');
    return { name: name!, hit: hit === undefined ? 1 : Number(hit), stallMs: action === undefined ? undefined : Number(action), stop, throws: code as SqliteErrorCode | undefined };
  });
}
