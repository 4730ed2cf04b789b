/**
 * npm run demo: the main job, end to end, on temp files and the embedded SQLite default.
 *
 * It starts `oncebox server` in its own process and runs the batch ingestion job
 * (examples/batch-ingest.ts, 50 batches) as child processes through four failures, one run each:
 *
 * 1. crash: attempt 1 is SIGKILLed at a random point; attempt 2 reopens its file and resumes;
 * 2. fresh machine: attempt 1 is SIGKILLed and its outbox file deleted; attempt 2 starts on a new file
 *    and resumes from the server's copy of the checkpoint;
 * 3. zombie: attempt 1 keeps running while attempt 2 starts on another machine; attempt 1 is fenced;
 * 4. zombie-same: the same, with attempt 2 on the same machine, opening attempt 1's outbox file.
 *
 * For each run it prints every partition with its event count, and at the end a verdict: ok only if
 * every batch of every run is on the server exactly once, in batch order, and both zombies were fenced.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { StoredEvent } from '../src/protocol/wire.js';
import { allEvents } from './events.js';

const BATCHES = 50;
/** `npm run demo -- --keep` keeps its files to look at after; a demo that fails keeps them anyway. */
const keepAsked = process.argv.slice(2).includes('--keep');
let kept = false;
const repo = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'oncebox-demo-'));
const partition = (batch: number) => `batch-${String(batch).padStart(4, '0')}`;
const randomBetween = (low: number, high: number) => low + Math.floor(Math.random() * (high - low + 1));

interface Started {
  child: ChildProcess;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function start(script: string, args: string[], onLine: (line: Record<string, unknown>, child: ChildProcess) => void = () => {}): Started {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] });
  let buffered = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      const text = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      try {
        onLine(JSON.parse(text), child);
      } catch {
        console.log(text);
      }
    }
  });
  return { child, exit: new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal }))) };
}

/** Why a run's events are wrong, or undefined when each batch is there once, in order, attempts never going back. */
function problemWith(events: StoredEvent[]): string | undefined {
  const keys = events.map((event) => event.partitionKey);
  for (let batch = 1; batch <= BATCHES; batch++) {
    const count = keys.filter((key) => key === partition(batch)).length;
    if (count !== 1) return `${partition(batch)} has ${count} events, expected exactly 1`;
  }
  if (keys.length !== BATCHES) return `${keys.length} events in all, expected ${BATCHES}`;
  const outOfOrder = keys.findIndex((key, i) => key !== partition(i + 1));
  if (outOfOrder >= 0) return `event ${outOfOrder + 1} is ${keys[outOfOrder]}, expected ${partition(outOfOrder + 1)}: out of commit order`;
  const backwards = events.findIndex((event, i) => i > 0 && event.attempt < events[i - 1]!.attempt);
  if (backwards >= 0) return `${keys[backwards]} was accepted from attempt ${events[backwards]!.attempt} after a later attempt had delivered`;
  return undefined;
}

function jobArgs(url: string, runId: string, db: string, attempt: number, pauseMs: number): string[] {
  return ['--db', db, '--server', url, '--data', join(dir, runId, 'data'), '--run-id', runId, '--attempt', String(attempt), '--batches', String(BATCHES), '--pause-ms', String(pauseMs)];
}

/** Runs attempt 1 until it has committed `killAfter` batches, then SIGKILLs it. */
async function killedAttempt(url: string, runId: string, db: string, killAfter: number): Promise<string | undefined> {
  let committed = 0;
  const first = start('examples/batch-ingest.ts', jobArgs(url, runId, db, 1, 15), (line, child) => {
    if (line.event === 'committed' && ++committed === killAfter) child.kill('SIGKILL');
  });
  const exit = await first.exit;
  console.log(`  attempt 1  killed with ${exit.signal ?? `exit ${exit.code}`} after committing ${committed} of ${BATCHES} batches`);
  return exit.signal === 'SIGKILL' ? undefined : 'attempt 1 was not killed';
}

async function resumedAttempt(url: string, runId: string, db: string): Promise<string | undefined> {
  let start_: Record<string, unknown> = {};
  const second = start('examples/batch-ingest.ts', jobArgs(url, runId, db, 2, 0), (line) => {
    if (line.event === 'start') start_ = line;
  });
  const exit = await second.exit;
  const from = start_.fromServer ? "the server's checkpoint copy" : 'its own checkpoint';
  console.log(`  attempt 2  resumed after batch ${String(start_.resumeFrom)} from ${from} and exited ${exit.code}`);
  return exit.code === 0 ? undefined : `attempt 2 exited ${exit.code}`;
}

interface Scenario {
  runId: string;
  title: string;
  run: (url: string) => Promise<string | undefined>;
}

/**
 * Attempt 1 keeps running while attempt 2 starts: on another machine (its own file), or on the same one
 * (the same file, as a retry on the same worker does). Either way attempt 1 must end fenced.
 */
function zombieScenario(runId: string, title: string, sameFile: boolean): Scenario {
  return {
    runId,
    title,
    run: async (url) => {
      const startRetryAt = randomBetween(3, 15);
      let retry: Started | undefined;
      let fenced: Record<string, unknown> | undefined;
      const zombie = start('examples/batch-ingest.ts', jobArgs(url, runId, join(dir, `${runId}-1.db`), 1, 100), (line) => {
        if (line.event === 'committed' && line.batch === startRetryAt) {
          retry = start('examples/batch-ingest.ts', jobArgs(url, runId, join(dir, `${runId}-${sameFile ? 1 : 2}.db`), 2, 5));
        }
        if (line.event === 'fenced') fenced = line;
      });
      const zombieExit = await zombie.exit;
      const retryExit = await retry?.exit;
      console.log(`  attempt 1  ${fenced ? `stopped with FencedError (fenced by attempt ${String(fenced.by)})` : `exited ${zombieExit.code} without being fenced`}`);
      console.log(`  attempt 2  started after attempt 1 committed batch ${startRetryAt}${sameFile ? ', on the same file' : ''}, exited ${retryExit?.code}`);
      if (!fenced || zombieExit.code !== 3) return 'the zombie was not fenced';
      return retryExit?.code === 0 ? undefined : `attempt 2 exited ${retryExit?.code}`;
    },
  };
}

const scenarios: Scenario[] = [
  {
    runId: 'crash',
    title: 'crash and resume on the same machine',
    run: async (url) => {
      const db = join(dir, 'crash.db');
      return (await killedAttempt(url, 'crash', db, randomBetween(5, BATCHES - 5))) ?? (await resumedAttempt(url, 'crash', db));
    },
  },
  {
    runId: 'fresh',
    title: 'retry on a fresh machine (the outbox file is lost)',
    run: async (url) => {
      const killed = await killedAttempt(url, 'fresh', join(dir, 'fresh-1.db'), randomBetween(5, BATCHES - 5));
      for (const suffix of ['', '-wal', '-shm']) rmSync(join(dir, `fresh-1.db${suffix}`), { force: true });
      return killed ?? (await resumedAttempt(url, 'fresh', join(dir, 'fresh-2.db')));
    },
  },
  zombieScenario('zombie', 'a zombie attempt beside its retry on another machine', false),
  zombieScenario('zombie-same', 'a zombie attempt beside its retry on the same machine, sharing its outbox file', true),
];

/**
 * The consumer stage: a summariser consumes every batch_ready event and emits batch_summarised for it; it
 * is SIGKILLed part-way and restarted on a fresh file (its machine lost). Then a trigger joins
 * batch_ready and batch_summarised by partition and emits batch_closed, once per partition, though each
 * partition has a batch_ready event from every run.
 */
async function consumerStage(url: string): Promise<string | undefined> {
  console.log('consumer stage: a summariser SIGKILLed and restarted on a fresh file, then a per-partition trigger');
  const sources = (await allEvents(url)).filter((event) => event.asset === 'batch_ready');
  const until = String(sources.at(-1)!.cursor);
  const summariser = (db: string) => ['--db', join(dir, db), '--server', url, '--group', 'summariser', '--source', 'batch_ready', '--target', 'batch_summarised', '--until', until];
  let consumed = 0;
  const killed = start('examples/order-summariser.ts', summariser('summariser-1.db'), (line, child) => {
    if (line.event === 'consumed' && ++consumed === Math.floor(sources.length / 3)) child.kill('SIGKILL');
  });
  const first = await killed.exit;
  console.log(`  summariser killed with ${first.signal ?? `exit ${first.code}`} after ${consumed} events`);
  let resumedAt: unknown;
  const again = start('examples/order-summariser.ts', summariser('summariser-2.db'), (line) => {
    if (line.event === 'start') resumedAt = line.cursor;
  });
  const second = await again.exit;
  console.log(`  summariser restarted on a fresh file from the mirrored cursor ${String(resumedAt)}, exited ${second.code}`);
  const summaries = (await allEvents(url)).filter((event) => event.asset === 'batch_summarised');
  const causes = summaries.map((event) => event.causedBy);
  if (second.code !== 0) return `the restarted summariser exited ${second.code}`;
  if (summaries.length !== sources.length || new Set(causes).size !== causes.length || causes.some((cause, i) => cause !== sources[i]!.eventId)) {
    return `${summaries.length} summaries for ${sources.length} batch events (each must have exactly one, in order)`;
  }
  console.log(`  ${summaries.length} batch events, ${summaries.length} summaries: each exactly once, in order`);
  const lastSummary = String(summaries.at(-1)!.cursor);
  let fired = 0;
  const trigger = start('examples/partition-trigger.ts', ['--db', join(dir, 'trigger.db'), '--server', url, '--when', 'batch_ready,batch_summarised', '--emit', 'batch_closed', '--until', lastSummary], (line) => {
    if (line.event === 'fired') fired++;
  });
  await trigger.exit;
  const closed = (await allEvents(url)).filter((event) => event.asset === 'batch_closed');
  const partitions = new Set(sources.map((event) => event.partitionKey));
  console.log(`  trigger fired ${fired} times for ${partitions.size} partitions (${sources.length / partitions.size} runs each); ${closed.length} batch_closed events`);
  if (fired !== partitions.size || closed.length !== partitions.size) return `the trigger fired ${fired} times for ${partitions.size} partitions`;
  return undefined;
}

async function main(): Promise<boolean> {
  const assets = join(dir, 'assets.txt');
  writeFileSync(assets, 'batch_ready\nbatch_summarised\nbatch_closed\n');
  let url = '';
  const server = start('src/cli/main.ts', ['server', '--db', join(dir, 'server.db'), '--port', '0', '--assets', assets], (line) => {
    if (line.event === 'listening') url = line.url as string;
  });
  while (!url) await new Promise((resolve) => setTimeout(resolve, 20));
  console.log(`server     ${url} (${join(dir, 'server.db')})`);

  const failures: string[] = [];
  for (const scenario of scenarios) {
    console.log(`run ${scenario.runId}: ${scenario.title}`);
    const failure = await scenario.run(url);
    const events = (await allEvents(url)).filter((event) => event.runId === scenario.runId);
    for (let batch = 1; batch <= BATCHES; batch++) {
      const mine = events.filter((event) => event.partitionKey === partition(batch));
      const attempts = [...new Set(mine.map((event) => event.attempt))].join(',');
      console.log(`${scenario.runId}/${partition(batch)}  ${mine.length} event${mine.length === 1 ? '' : 's'}  (attempt ${attempts || '-'})`);
    }
    const problem = failure ?? problemWith(events);
    if (problem) failures.push(`run ${scenario.runId}: ${problem}`);
  }
  const consumerProblem = await consumerStage(url);
  if (consumerProblem) failures.push(`consumer stage: ${consumerProblem}`);
  server.child.kill('SIGTERM');
  await server.exit;

  if (keepAsked || failures.length > 0) {
    kept = true;
    console.log(`kept: ${dir} (the server's server.db, and each run's outbox files: \`npm run oncebox -- status FILE\`, or \`npm run oncebox -- server --db ${join(dir, 'server.db')}\` to see them in the console)`);
  }
  console.log(
    failures.length > 0
      ? `verdict: FAIL ${failures.join('; ')}`
      : `verdict: ok (${scenarios.length} runs of ${BATCHES} batches, each batch exactly once and in order, through a SIGKILL, a lost outbox file and a fenced zombie on another machine and on the same one; ` +
          `each batch summarised once by a consumer SIGKILLed and restarted on a fresh file, and the trigger fired once per partition)`,
  );
  return failures.length === 0;
}

main()
  .then((ok) => {
    if (!kept) rmSync(dir, { recursive: true, force: true });
    process.exit(ok ? 0 : 1);
  })
  .catch((error: unknown) => {
    console.log(`verdict: FAIL ${(error as Error).message}`);
    process.exit(1);
  });
