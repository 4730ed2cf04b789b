/**
 * npm run demo: the main job, end to end, on temp files and the embedded SQLite default.
 *
 * 1. starts `oncebox server` in its own process;
 * 2. runs the batch ingestion job (examples/batch-ingest.ts) over 50 batches and SIGKILLs it at a
 *    random point;
 * 3. restarts it as attempt 2, which resumes from its checkpoint;
 * 4. prints each partition with its event count and a verdict: ok only if every batch is on the server
 *    exactly once, in batch order.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EventPage, StoredEvent } from '../src/protocol/wire.js';

const BATCHES = 50;
const repo = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'oncebox-demo-'));
const partition = (batch: number) => `batch-${String(batch).padStart(4, '0')}`;

function start(script: string, args: string[], onLine: (line: Record<string, unknown>) => void = () => {}): { child: ChildProcess; exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { cwd: repo, stdio: ['ignore', 'pipe', 'inherit'] });
  let buffered = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      const text = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      try {
        onLine(JSON.parse(text));
      } catch {
        console.log(text);
      }
    }
  });
  return { child, exit: new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal }))) };
}

async function allEvents(url: string): Promise<StoredEvent[]> {
  const events: StoredEvent[] = [];
  for (let after = 0; ; ) {
    const page = (await (await fetch(`${url}/v1/events?after=${after}&limit=1000`)).json()) as EventPage;
    if (page.events.length === 0) return events;
    events.push(...page.events);
    after = page.next;
  }
}

function verdict(events: StoredEvent[]): string | undefined {
  const keys = events.map((event) => event.partitionKey);
  for (let batch = 1; batch <= BATCHES; batch++) {
    const count = keys.filter((key) => key === partition(batch)).length;
    if (count !== 1) return `${partition(batch)} has ${count} events, expected exactly 1`;
  }
  if (keys.length !== BATCHES) return `${keys.length} events in all, expected ${BATCHES}`;
  const outOfOrder = keys.findIndex((key, i) => key !== partition(i + 1));
  if (outOfOrder >= 0) return `event ${outOfOrder + 1} is ${keys[outOfOrder]}, expected ${partition(outOfOrder + 1)}: out of commit order`;
  return undefined;
}

async function main(): Promise<boolean> {
  const assets = join(dir, 'assets.txt');
  writeFileSync(assets, 'batch_ready\n');
  let url = '';
  const server = start('src/cli/main.ts', ['server', '--db', join(dir, 'server.db'), '--port', '0', '--assets', assets], (line) => {
    if (line.event === 'listening') url = line.url as string;
  });
  while (!url) await new Promise((resolve) => setTimeout(resolve, 20));
  console.log(`server     ${url} (${join(dir, 'server.db')})`);

  const jobArgs = (attempt: number) => ['--db', join(dir, 'outbox.db'), '--server', url, '--data', join(dir, 'data'), '--attempt', String(attempt), '--batches', String(BATCHES), '--pause-ms', '15'];
  const killAfter = 5 + Math.floor(Math.random() * (BATCHES - 10));
  let committed = 0;
  const first = start('examples/batch-ingest.ts', jobArgs(1), (line) => {
    if (line.event === 'committed' && ++committed === killAfter) first.child.kill('SIGKILL');
  });
  const firstExit = await first.exit;
  console.log(`attempt 1  killed with ${firstExit.signal ?? `exit ${firstExit.code}`} after committing ${committed} of ${BATCHES} batches`);

  let resumedFrom: unknown;
  const second = start('examples/batch-ingest.ts', jobArgs(2), (line) => {
    if (line.event === 'start') resumedFrom = line.resumeFrom;
  });
  const secondExit = await second.exit;
  console.log(`attempt 2  resumed after batch ${String(resumedFrom)} and exited ${secondExit.code}`);

  const events = await allEvents(url);
  server.child.kill('SIGTERM');
  await server.exit;

  for (let batch = 1; batch <= BATCHES; batch++) {
    const mine = events.filter((event) => event.partitionKey === partition(batch));
    const attempts = [...new Set(mine.map((event) => event.attempt))].join(',');
    console.log(`${partition(batch)}  ${mine.length} event${mine.length === 1 ? '' : 's'}  (attempt ${attempts || '-'})`);
  }
  const failure =
    firstExit.signal !== 'SIGKILL'
      ? 'attempt 1 was not killed'
      : secondExit.code !== 0
        ? `attempt 2 exited ${secondExit.code}`
        : verdict(events);
  console.log(failure ? `verdict: FAIL ${failure}` : `verdict: ok (${BATCHES} batches, each exactly once, in order, across a SIGKILL and a resume)`);
  return failure === undefined;
}

main()
  .then((ok) => {
    rmSync(dir, { recursive: true, force: true });
    process.exit(ok ? 0 : 1);
  })
  .catch((error: unknown) => {
    console.log(`verdict: FAIL ${(error as Error).message}`);
    process.exit(1);
  });
