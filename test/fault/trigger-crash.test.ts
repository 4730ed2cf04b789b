import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openOutbox } from '../../src/outbox/index.js';
import { runScript } from '../support/child.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/**
 * G22 with real processes: `examples/partition-trigger.ts` (a trigger on orders_ready and payments_ready
 * that emits daily_close_ready) is SIGKILLed at each step of an arrival and a firing, restarted on the
 * same file or on a fresh one, and then sees a re-run's newer events for the days that already fired,
 * on another fresh file that rebuilds its state. Each day's close reaches the server exactly once.
 */

const DAYS = 4;
const TRIGGER = 'examples/partition-trigger.ts';
const quiet = { info() {}, warn() {}, error() {} };
const day = (n: number) => `day-${n}`;

/** Orders and payments for every day, interleaved; a second run re-emits the orders (newer events). */
async function publish(server: RunningServer, dir: string, run: number, assets: readonly string[]): Promise<void> {
  for (const asset of assets) {
    const box = await openOutbox({ path: join(dir, `${asset}-${run}.db`), server: server.url, producer: asset, run: { workflow: 'wf', runId: `run-${run}`, attempt: 1 }, logger: quiet });
    for (let n = 1; n <= DAYS; n++) box.commit((tx) => tx.emit(box.asset(asset), { partitionKey: day(n) }));
    await box.close();
  }
}

function trigger(server: RunningServer, db: string, until: number, env: Record<string, string> = {}) {
  return runScript(TRIGGER, ['--db', db, '--server', server.url, '--until', String(until)], { env, timeoutMs: 60_000 });
}

async function expectEachDayClosedOnce(server: RunningServer, context: string): Promise<void> {
  const closes = await server.events({ asset: 'daily_close_ready' });
  expect(closes.map((event) => event.partitionKey).sort(), context).toEqual(Array.from({ length: DAYS }, (_, i) => day(i + 1)));
  // Each close names the first run's events: a newer event never fired the day again.
  const firstRun = new Set((await server.events()).filter((event) => event.runId === 'run-1').map((event) => event.eventId));
  for (const close of closes) expect((close.extra as { inputs: string[] }).inputs.every((id) => firstRun.has(id)), context).toBe(true);
}

describe('a per-partition trigger killed with SIGKILL', () => {
  it.each([
    ['before the handler of a completing event', 'consume:before-handler@6'],
    ["inside the firing's commit, its writes made but not committed", 'commit:after-write@6'],
    ["between the firing's commit and its delivery", 'commit:after-commit@6'],
    ['after the firing committed, before the next fetch', 'consume:after-commit@6'],
    ['after a delivery reached the server, before its answer was recorded', 'relay:after-response@1'],
  ])('%s fires each day once: on the same file, on a fresh one, and through a rebuild that then sees newer events', { timeout: 180_000 }, async (_name, failpoint) => {
    for (const restartOn of ['the same file', 'a fresh file'] as const) {
      const context = `${failpoint}, restarted on ${restartOn}`;
      const server = await startServer({ assets: ['orders_ready', 'payments_ready', 'daily_close_ready'] });
      const dir = tempDir();
      await publish(server, dir, 1, ['orders_ready', 'payments_ready']);
      const first = join(dir, 'first.db');
      const killed = await trigger(server, first, 2 * DAYS, { ONCEBOX_FAILPOINT: failpoint });
      expect(killed.signal, `${context}: ${killed.stderr}`).toBe('SIGKILL');
      const second = restartOn === 'the same file' ? first : join(dir, 'second.db');
      const restarted = await trigger(server, second, 2 * DAYS);
      expect(restarted.code, `${context}: ${restarted.stderr}`).toBe(0);
      expect(restarted.lines.at(-1), context).toMatchObject({ event: 'done', pending: 0 });
      await expectEachDayClosedOnce(server, context);
      // A re-run of the orders job: a newer event for each day that fired. Seen by a consumer on yet
      // another file, which rebuilds its arrivals and firings from the events up to its mirrored cursor.
      await publish(server, dir, 2, ['orders_ready']);
      const rebuilt = await trigger(server, join(dir, 'rebuilt.db'), 3 * DAYS);
      expect(rebuilt.code, `${context}: ${rebuilt.stderr}`).toBe(0);
      expect(rebuilt.lines.filter((line) => line.event === 'fired'), context).toEqual([]);
      await expectEachDayClosedOnce(server, context);
      await server.close();
    }
  });
});
