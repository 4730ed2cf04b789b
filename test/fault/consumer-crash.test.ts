import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openOutbox } from '../../src/outbox/index.js';
import { runScript } from '../support/child.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const EVENTS = 8;
const CONSUMER = 'examples/order-summariser.ts';
const quiet = { info() {}, warn() {}, error() {} };
const partition = (n: number) => `day-${n}`;

async function publishOrders(server: RunningServer, dir: string): Promise<void> {
  const box = await openOutbox({ path: join(dir, 'orders.db'), server: server.url, producer: 'orders', run: { workflow: 'wf', runId: 'r', attempt: 1 }, logger: quiet });
  box.commit((tx) => {
    for (let n = 1; n <= EVENTS; n++) tx.emit(box.asset('orders_ready'), { partitionKey: partition(n) });
  });
  await box.close();
}

function appliedCounts(path: string): Map<string, number> {
  const db = new Database(path, { readonly: true });
  const rows = db.prepare('SELECT partition_key, applied FROM order_counts').all() as { partition_key: string; applied: number }[];
  db.close();
  return new Map(rows.map((row) => [row.partition_key, row.applied]));
}

/** Runs the consumer to the last event; with a pause after each, its relay delivers as it goes. */
function consume(server: RunningServer, db: string, env: Record<string, string> = {}, pauseMs = 0, extra: string[] = []) {
  const args = ['--db', db, '--server', server.url, '--until', String(EVENTS), '--pause-ms', String(pauseMs), ...extra];
  return runScript(CONSUMER, args, { env, timeoutMs: 60_000 });
}

/** Each source event has exactly one summary on the server, in the order of the sources. */
async function expectEachSummaryOnce(server: RunningServer): Promise<void> {
  const sources = await server.events({ asset: 'orders_ready' });
  const summaries = await server.events({ asset: 'orders_summarised' });
  expect(summaries.map((e) => e.partitionKey)).toEqual(sources.map((e) => e.partitionKey));
  expect(summaries.map((e) => e.causedBy)).toEqual(sources.map((e) => e.eventId));
}

describe('a consumer killed with SIGKILL', () => {
  it.each([
    ['before the handler', 'consume:before-handler@4'],
    ['inside ctx.commit, its writes made but not committed', 'commit:after-write@4'],
    ["between its emission's commit and its delivery", 'commit:after-commit@4'],
    ['after the commit, before the next fetch', 'consume:after-commit@4'],
  ])('%s applies each effect once on restart, and each summary reaches the server once', { timeout: 240_000 }, async (_name, failpoint) => {
    const server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publishOrders(server, dir);
    const file = join(dir, 'summariser.db');
    const killed = await consume(server, file, { ONCEBOX_FAILPOINT: failpoint });
    expect(killed.signal).toBe('SIGKILL');
    const restarted = await consume(server, file);
    expect(restarted.code).toBe(0);
    expect(restarted.lines.at(-1)).toMatchObject({ event: 'done', cursor: EVENTS, pending: 0 });
    expect(Object.fromEntries(appliedCounts(file))).toEqual(Object.fromEntries(Array.from({ length: EVENTS }, (_, i) => [partition(i + 1), 1])));
    await expectEachSummaryOnce(server);
  });

  it.each([
    ['before the handler', 'consume:before-handler@6'],
    ["between its emission's commit and its delivery", 'commit:after-commit@6'],
    ['after the commit, before the next fetch', 'consume:after-commit@6'],
    // One row per request: the summary of an event reached the server, its cursor update did not. The
    // fresh file processes that event again and derives the same key: the server keeps one summary.
    ['after a summary was delivered, before its cursor was', 'relay:after-response@11', ['--relay-one-row']],
  ])('%s, restarted on a fresh file, resumes from the mirrored cursor and sends each summary once', { timeout: 240_000 }, async (_name, failpoint, extra: string[] = []) => {
    const server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publishOrders(server, dir);
    const killed = await consume(server, join(dir, 'lost-machine.db'), { ONCEBOX_FAILPOINT: failpoint }, 100, extra);
    expect(killed.signal).toBe('SIGKILL');
    const fresh = join(dir, 'new-machine.db');
    const restarted = await consume(server, fresh);
    expect(restarted.code).toBe(0);
    const resumedAt = restarted.lines[0]!.cursor as number;
    // The mirror is never ahead of the summaries the server holds, and it did move (the old file delivered some).
    expect(resumedAt).toBeGreaterThan(0);
    const counts = appliedCounts(fresh);
    for (let n = 1; n <= EVENTS; n++) expect(counts.get(partition(n)) ?? 0, partition(n)).toBe(n > resumedAt ? 1 : 0);
    await expectEachSummaryOnce(server);
  });
});
