import Database from 'better-sqlite3';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forwardedKey, openAirflowForwarder, type AirflowForwarderOptions } from '../../src/airflow/index.js';
import { openOutbox } from '../../src/outbox/index.js';
import { seedWhere } from '../../scripts/airflow/chain.js';
import { seededRandom } from '../support/seeded-random.js';
import { freePort, type RunningAirflow } from '../../scripts/airflow/harness.js';
import { airflowAvailable, airflowForTests, stopAirflowsForTests, airflowSkipReason } from '../support/airflow.js';
import { startScript } from '../support/child.js';
import { startFaultProxy, type Fault } from '../support/fault-proxy.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet = { info() {}, warn() {}, error() {} };
const ASSET = 'oncebox_batches';
const DOWNSTREAM = 'oncebox_partition_consumer';

let airflow: RunningAirflow;
let home: string;

beforeAll(async () => {
  if (!airflowAvailable) return;
  home = mkdtempSync(join(tmpdir(), 'oncebox-airflow-'));
  // Tokens that expire within the test, so that the forwarder has to renew its own.
  airflow = await airflowForTests({ name: `fwd_${process.pid}`, dir: home, tokenLifetimeSeconds: 8 });
}, 240_000);

afterAll(async () => {
  await stopAirflowsForTests();
  if (home) rmSync(home, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
});

/** A forwarder in `dir` of `server`'s events into this file's Airflow, as the user it signs in as; `options` changes any of that. */
function openForwarder(dir: string, server: RunningServer, options: Partial<AirflowForwarderOptions> = {}) {
  return openAirflowForwarder({
    path: join(dir, 'forwarder.db'),
    server: server.url,
    airflow: airflow.url,
    credentials: { username: airflow.username, password: airflow.password },
    map: { batch_ready: ASSET },
    logger: quiet,
    ...options,
  });
}

async function publish(server: RunningServer, dir: string, prefix: string, count: number): Promise<void> {
  const box = await openOutbox({ path: join(dir, 'job.db'), server: server.url, producer: 'airflow-test', run: { workflow: 'wf', runId: prefix, attempt: 1 }, logger: quiet });
  const asset = box.asset('batch_ready');
  for (let n = 1; n <= count; n++) box.commit((tx) => tx.emit(asset, { partitionKey: `${prefix}batch-${n}`, extra: { rows: n } }));
  const closed = await box.close();
  expect(closed.pending).toBe(0);
}

/** Runs `oncebox forward airflow` as a child process until `done` says so; returns its output lines. */
function forwarder(server: RunningServer, airflowUrl: string, db: string, env: Record<string, string> = {}, extra: string[] = []) {
  const map = join(db + '.map.json');
  writeFileSync(map, JSON.stringify({ batch_ready: { name: ASSET } }));
  return startScript(
    'src/cli/main.ts',
    ['forward', 'airflow', '--server', server.url, '--airflow', airflowUrl, '--map', map, '--db', db, '--settle-ms', '200', ...extra],
    { ONCEBOX_AIRFLOW_USERNAME: airflow.username, ONCEBOX_AIRFLOW_PASSWORD: airflow.password, ...env },
    // Killed after 120 s in any case: a stage whose failpoint is never reached (a seed that breaks the
    // test's rule for its draws) would otherwise run on until the test's own timeout.
    { timeoutMs: 120_000 },
  );
}

/** The Airflow events whose partition starts with `prefix`, by oncebox key. */
async function eventsByKey(prefix: string): Promise<Map<string, number>> {
  const events = await airflow.admin.assetEvents(await airflow.admin.assetId(ASSET));
  const counts = new Map<string, number>();
  for (const event of events) {
    if (!event.partition_key?.startsWith(prefix)) continue;
    const key = forwardedKey(event) ?? `(no key) ${event.id}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

/** Waits for one downstream run per partition, then a little longer, and returns the runs per partition. */
async function runsPerPartition(prefix: string, partitions: number): Promise<Map<string, number>> {
  const ours = async () => (await airflow.admin.dagRuns(DOWNSTREAM)).filter((run) => run.partition_key?.startsWith(prefix));
  await airflow.admin.until(`${partitions} downstream runs`, ours, (runs) => runs.length >= partitions, 120_000);
  // A duplicate event's run would come a scheduler loop or two later: give it the time to show.
  await new Promise((resolve) => setTimeout(resolve, 4000));
  const counts = new Map<string, number>();
  for (const run of await ours()) counts.set(run.partition_key!, (counts.get(run.partition_key!) ?? 0) + 1);
  return counts;
}

describe.skipIf(!airflowAvailable)(`the Airflow forwarder against a real Airflow${airflowSkipReason}`, () => {
  it('forwards each event exactly once through lost answers, SIGKILLs and a fresh file, with one downstream run per partition', { timeout: 400_000 }, async () => {
    const EVENTS = 30;
    const DROP_RATE = 0.33;
    // Each event is posted once: an answer lost is found by the lookup, not posted again. So the stages'
    // failpoints below count posts of new events, and the draws decide where each stage ends: the first
    // after its 8th answered post, the second after 6 more. The third must still find 4 events to post,
    // so the 14th answer must come by the 26th post (a seed dropping too many early answers left the
    // third stage nothing to post: it never reached its failpoint and ran on until killed). And at least
    // 8 of the 30 posts lose their answer, so that a fifth of all are lost.
    const stagesReachTheirFailpoints = (draws: number[]) => {
      const answered = draws.map((draw, post) => (draw >= DROP_RATE ? post + 1 : 0)).filter((post) => post > 0);
      return (answered[13] ?? Infinity) <= EVENTS - 4 && draws.filter((draw) => draw < DROP_RATE).length >= 8;
    };
    const seed = Number(process.env.ONCEBOX_SEED ?? seedWhere(Date.now() % 1_000_000, EVENTS, stagesReachTheirFailpoints));
    expect(stagesReachTheirFailpoints(Array.from({ length: EVENTS }, seededRandom(seed))), `seed ${seed} drops too many early answers for this test's stages`).toBe(true);
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    const prefix = `fwd-${seed}/`;
    await publish(server, dir, prefix, EVENTS);

    // Lost answers: about a third of the posts reach Airflow, commit, and their answer never comes back.
    const chance = seededRandom(seed);
    let posts = 0;
    let dropped = 0;
    const proxy = await startFaultProxy(airflow.url, {
      choose: ({ method, url }): Fault | undefined => {
        if (method !== 'POST' || !url.startsWith('/api/v2/assets/events')) return undefined;
        posts++;
        if (chance() >= DROP_RATE) return undefined;
        dropped++;
        return 'drop-response';
      },
    });
    const context = `seed ${seed} (set ONCEBOX_SEED to replay)`;
    console.log(`forwarder lost answers: ${context}`);

    // Killed right after Airflow committed its 8th post, before the receipts of its batch (up to 20 events)
    // were committed: those events are in Airflow, unrecorded.
    const first = forwarder(server, proxy.url, join(dir, 'forwarder.db'), { ONCEBOX_FAILPOINT: 'forward:after-post@8' });
    const firstRun = await first.done;
    expect({ signal: firstRun.signal, timedOut: firstRun.timedOut }, `${context}: the first stage ends at its failpoint; ${firstRun.stderr}`).toEqual({ signal: 'SIGKILL', timedOut: false });
    // Again on the same file, killed after its 6th post; one receipt per commit, so that its lines show each event.
    const second = forwarder(server, proxy.url, join(dir, 'forwarder.db'), { ONCEBOX_FAILPOINT: 'forward:after-post@6' }, ['--batch-size', '1']);
    const secondRun = await second.done;
    expect({ signal: secondRun.signal, timedOut: secondRun.timedOut }, `${context}: the second stage ends at its failpoint; ${secondRun.stderr}`).toEqual({ signal: 'SIGKILL', timedOut: false });
    // The event whose receipt the kill cut off is the first the restarted forwarder handled: found, not posted again.
    expect(secondRun.lines.find((line) => line.event === 'forwarded'), context).toMatchObject({ foundByLookup: true });
    // And once more, killed just before a post: that event is neither in Airflow nor recorded, and must not be lost.
    const third = forwarder(server, proxy.url, join(dir, 'forwarder.db'), { ONCEBOX_FAILPOINT: 'forward:before-post@4' });
    const thirdRun = await third.done;
    expect({ signal: thirdRun.signal, timedOut: thirdRun.timedOut }, `${context}: the third stage ends at its failpoint; ${thirdRun.stderr}`).toEqual({ signal: 'SIGKILL', timedOut: false });
    // Then on a fresh file, a lost machine: the cursor comes back from the server's mirror, which may lag.
    const last = forwarder(server, proxy.url, join(dir, 'fresh.db'));
    await last.waitFor((line) => line.event === 'forwarded' && line.cursor === EVENTS);
    last.signal('SIGTERM');
    const lastRun = await last.done;
    expect(lastRun.code, `${context}: ${lastRun.stderr}`).toBe(0);

    const perKey = await eventsByKey(prefix);
    expect(perKey.size, context).toBe(EVENTS);
    expect([...perKey.values()].every((count) => count === 1), `${context}: ${JSON.stringify([...perKey])}`).toBe(true);
    expect(dropped / posts, `${context}: ${dropped} of ${posts} answers dropped`).toBeGreaterThanOrEqual(0.2);

    const runs = await runsPerPartition(prefix, EVENTS);
    expect(runs.size, context).toBe(EVENTS);
    expect([...runs.values()].every((count) => count === 1), `${context}: ${JSON.stringify([...runs])}`).toBe(true);

    // The receipts name the Airflow events the forwarder found or posted: each one is the event Airflow holds for that key.
    const airflowIds = new Map((await airflow.admin.assetEvents(await airflow.admin.assetId(ASSET))).map((event) => [forwardedKey(event), event.id]));
    const db = new Database(join(dir, 'fresh.db'), { readonly: true });
    const receipts = db.prepare('SELECT oncebox_key, airflow_event_id FROM airflow_forwards').all() as { oncebox_key: string; airflow_event_id: number }[];
    db.close();
    expect(receipts.length).toBeGreaterThan(0);
    for (const receipt of receipts) expect(receipt.airflow_event_id).toBe(airflowIds.get(receipt.oncebox_key));
  });

  it('renews its token before it expires, so that Airflow never refuses it', { timeout: 180_000 }, async () => {
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    const prefix = `renewal-${Date.now()}/`;
    let signIns = 0;
    const refused: string[] = [];
    const proxy = await startFaultProxy(airflow.url, {
      onAnswer: ({ method, url }, status) => {
        if (url.startsWith('/auth/token')) signIns++;
        else if (status === 401) refused.push(`${method} ${url}`);
      },
    });
    const forwarder = await openForwarder(dir, server, { airflow: proxy.url, waitSeconds: 1 });
    const box = await openOutbox({ path: join(dir, 'job.db'), server: server.url, producer: 'renewal', run: { workflow: 'wf', runId: prefix, attempt: 1 }, logger: quiet });
    const stop = new AbortController();
    const EVENTS = 10;
    const running = forwarder.run({ signal: stop.signal, onForwarded: (receipt) => receipt.cursor >= EVENTS && stop.abort() });
    // An event every second for ten seconds: the 8-second tokens run out twice meanwhile.
    for (let n = 1; n <= EVENTS; n++) {
      box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: `${prefix}batch-${n}` }));
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    expect((await running).forwarded).toBe(EVENTS);
    await forwarder.close();
    await box.close();
    expect(refused).toEqual([]);
    expect(signIns).toBeGreaterThanOrEqual(2);
  });

  it('refuses to start on a map naming an asset Airflow does not have, and forwards nothing', async () => {
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    await publish(server, dir, 'unknown-asset/', 1);
    const opening = openForwarder(dir, server, { map: { batch_ready: { name: 'no_such_airflow_asset' } } });
    await expect(opening).rejects.toMatchObject({ code: 'airflow_unknown_asset', field: 'batch_ready.name' });
    await expect(opening).rejects.toThrow(/"batch_ready" to the Airflow asset with name "no_such_airflow_asset", but Airflow at http:\/\/127\.0\.0\.1:\d+ has none/);
    // Refused before the consumer opened: no file, no cursor, nothing marked forwarded.
    expect(existsSync(join(dir, 'forwarder.db'))).toBe(false);
  });

  it('resolves a map entry by URI to the same Airflow asset as by name', async () => {
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    const byUri = await openForwarder(dir, server, { path: join(dir, 'by-uri.db'), group: 'by-uri', map: { batch_ready: { uri: 'oncebox://orders/batch_ready' } } });
    const byName = await openForwarder(dir, server, { path: join(dir, 'by-name.db'), group: 'by-name' });
    expect(byUri.resolvedAssets.get('batch_ready')).toEqual(byName.resolvedAssets.get('batch_ready'));
    expect(byUri.resolvedAssets.get('batch_ready')).toMatchObject({ name: ASSET, uri: 'oncebox://orders/batch_ready', id: await airflow.admin.assetId(ASSET) });
    await byUri.close();
    await byName.close();
  });

  it('resolves a map entry by URI written as a user writes it, where Airflow stores another form', async () => {
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    // Airflow keeps `ceo://refunds` as `ceo://refunds/`, and `s3://bucket/landed/` as `s3://bucket/landed`.
    const forms: [string, string][] = [
      ['ceo://refunds', 'refunds'],
      ['ceo://refunds/', 'refunds'],
      ['CEO://refunds', 'refunds'],
      ['s3://bucket/landed/', 'landed'],
      ['S3://bucket/landed//', 'landed'],
    ];
    for (const [index, [uri, name]] of forms.entries()) {
      const forwarder = await openForwarder(dir, server, { path: join(dir, `form-${index}.db`), group: `form-${index}`, map: { batch_ready: { uri } } });
      expect(forwarder.resolvedAssets.get('batch_ready'), uri).toMatchObject({ name, id: await airflow.admin.assetId(name) });
      await forwarder.close();
    }
  });

  it('refuses wrong credentials with an error naming the user, and forwards nothing', async () => {
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    const opening = openForwarder(dir, server, { credentials: { username: airflow.username, password: 'wrong' } });
    await expect(opening).rejects.toMatchObject({ code: 'airflow_credentials' });
    await expect(opening).rejects.toThrow(`refused the credentials of user "${airflow.username}"`);
    expect(existsSync(join(dir, 'forwarder.db'))).toBe(false);
  });

  it('refuses to start when Airflow does not answer, naming the URL', async () => {
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    const closedPort = await freePort();
    const opening = openForwarder(dir, server, { airflow: `http://127.0.0.1:${closedPort}`, credentials: { username: 'x', password: 'y' } });
    await expect(opening).rejects.toMatchObject({ code: 'airflow_unreachable' });
    await expect(opening).rejects.toThrow(`cannot reach Airflow at http://127.0.0.1:${closedPort}/auth/token: no answer: ECONNREFUSED`);
    await expect(opening).rejects.toThrow("is Airflow's API server running there?");
    expect(existsSync(join(dir, 'forwarder.db'))).toBe(false);
  });

  it('marks nothing forwarded while Airflow goes away mid-run, and forwards each event once when it is back', { timeout: 240_000 }, async () => {
    const dir = tempDir();
    const server = await startServer({ assets: ['batch_ready'] });
    const prefix = `outage-${Date.now()}/`;
    await publish(server, dir, prefix, 3);
    const proxy = await startFaultProxy(airflow.url);
    const warnings: string[] = [];
    const forwarder = await openForwarder(dir, server, {
      airflow: proxy.url,
      settleMs: 100,
      retryMaxDelayMs: 200,
      waitSeconds: 1,
      logger: { ...quiet, warn: (_: unknown, message: string) => warnings.push(message) },
    });
    // Airflow is unreachable: every request is cut before it gets there.
    proxy.setUpstream(`http://127.0.0.1:${await freePort()}`);
    const stop = new AbortController();
    const running = forwarder.run({ signal: stop.signal, onForwarded: (receipt) => receipt.cursor >= 3 && stop.abort() });
    await airflow.admin.until('the forwarder to report Airflow down', async () => forwarder.status(), (status) => status.lastAirflowError !== null, 20_000);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(forwarder.status().forwarded).toBe(0);
    expect(forwarder.status().lastAirflowError).toMatch(/at http:\/\/127\.0\.0\.1:\d+\S*: no answer/);
    // Logged once for the cause, not once per retry.
    expect(warnings.length).toBe(1);

    proxy.setUpstream(airflow.url);
    const result = await running;
    expect(result.forwarded).toBe(3);
    expect(forwarder.status().lastAirflowError).toBeNull();
    await forwarder.close();
    const perKey = await eventsByKey(prefix);
    expect([...perKey.values()]).toEqual([1, 1, 1]);
  });
});
