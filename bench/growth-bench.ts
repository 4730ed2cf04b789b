import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pino } from 'pino';
import { openConsumer } from '../src/consumer/index.js';
import { openOutbox } from '../src/outbox/index.js';
import { benchDir, repo, startServerProcess } from './support.js';

const PER_COMMIT = 1000;
const SAMPLE_EVERY_MS = 100;

export interface GrowthRun {
  /** Events per second `oncebox relay --drain` delivered, from its start to its exit. */
  drainEventsPerS: number;
  /** The relay process's resident memory when a tenth of the drain's time had passed, in MiB. */
  rssAtTenthMb: number;
  /** Its highest resident memory after that, in MiB. */
  rssPeakMb: number;
  /** Peak over the tenth: what the backlog made the relay hold beyond its working set. */
  rssGrowthMb: number;
  /**
   * The relay's live heap after its full collections past the tenth: the most after any of them, less
   * the first. Null when none ran.
   */
  liveHeapGrowthMb: number | null;
  /** Full collections past the tenth. */
  fullGcs: number;
  /** Events per second a consumer processed catching up over the whole backlog, in batches of 1000. */
  consumerCatchUpPerS: number;
}

function residentMb(pid: number): number | null {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) / 1024 : null;
  } catch {
    return null;
  }
}

/**
 * A backlog of `rows` emissions (a job committed them with relay: 'external' while the server was away)
 * drained by `oncebox relay FILE --drain` in its own process, its resident memory read every 100 ms; then
 * a consumer catching up over all of them from the start. Both at default settings.
 */
export async function backlogGrowth(rows: number): Promise<GrowthRun> {
  const dir = benchDir();
  const server = await startServerProcess(dir);
  try {
    const path = join(dir, 'backlog.db');
    const box = await openOutbox({ path, server: server.url, producer: 'bench', run: { workflow: 'w', runId: 'r', task: 't', attempt: 1 }, relay: 'external',
      // Closing with the backlog undelivered is the point here, not a warning.
      logger: pino({ level: 'silent' }),
    });
    const asset = box.asset('batch_ready');
    for (let c = 0; c < rows / PER_COMMIT; c++) {
      box.commit((tx) => {
        for (let e = 0; e < PER_COMMIT; e++) tx.emit(asset, { partitionKey: `p-${c}-${e}`, extra: { rows: e } });
      });
    }
    await box.close();

    const started = performance.now();
    // --trace-gc prints each collection on stdout: the live heap after each full one tells a leak (it
    // grows) from V8 letting garbage pile up before collecting it (resident memory grows, the live heap not).
    const relay = spawn(process.execPath, ['--trace-gc', '--import', 'tsx', 'src/cli/main.ts', 'relay', path, '--server', server.url, '--drain'], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const liveAfterFullGc: { at: number; mb: number }[] = [];
    createInterface({ input: relay.stdout! }).on('line', (line) => {
      const gc = / (\d+) ms: Mark-Compact [\d.]+ \([\d.]+\) -> ([\d.]+) \(/.exec(line);
      if (gc) liveAfterFullGc.push({ at: Number(gc[1]), mb: Number(gc[2]) });
    });
    const samples: { at: number; mb: number }[] = [];
    const sampler = setInterval(() => {
      const mb = residentMb(relay.pid!);
      if (mb !== null) samples.push({ at: performance.now() - started, mb });
    }, SAMPLE_EVERY_MS);
    const code = await new Promise<number | null>((resolve) => relay.once('exit', resolve));
    clearInterval(sampler);
    const seconds = (performance.now() - started) / 1000;
    if (code !== 0) throw new Error(`growth bench: oncebox relay --drain exited ${code}`);
    const tenth = (seconds * 1000) / 10;
    const rssAtTenthMb = samples.find((sample) => sample.at >= tenth)?.mb ?? samples[0]!.mb;
    const rssPeakMb = Math.max(...samples.filter((sample) => sample.at >= tenth).map((sample) => sample.mb));
    // The heap after the first full collection past the tenth, and the most after any later one.
    const liveLater = liveAfterFullGc.filter((gc) => gc.at >= tenth);
    const liveHeapAtTenthMb = liveLater[0]?.mb ?? null;
    const liveHeapPeakMb = liveLater.length === 0 ? null : Math.max(...liveLater.map((gc) => gc.mb));

    const consumer = await openConsumer({ path: join(dir, 'consumer.db'), server: server.url, group: 'bench', assets: ['batch_ready'], batchSize: 1000 });
    const stop = new AbortController();
    const catchUpStarted = performance.now();
    let seen = 0;
    await consumer.run(
      (batch) => {
        seen += batch.length;
        if (seen >= rows) stop.abort();
      },
      { batch: true, signal: stop.signal },
    );
    const consumerCatchUpPerS = rows / ((performance.now() - catchUpStarted) / 1000);
    await consumer.close({ timeoutMs: 30_000 });
    return {
      drainEventsPerS: rows / seconds,
      rssAtTenthMb,
      rssPeakMb,
      rssGrowthMb: rssPeakMb - rssAtTenthMb,
      liveHeapGrowthMb: liveHeapAtTenthMb === null || liveHeapPeakMb === null ? null : liveHeapPeakMb - liveHeapAtTenthMb,
      fullGcs: liveLater.length,
      consumerCatchUpPerS,
    };
  } finally {
    await server.stop();
  }
}
