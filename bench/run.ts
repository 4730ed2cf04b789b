/**
 * npm run bench [-- --json] [-- --quick] [-- --only SECTION] [-- --require-peers] (USAGE below)
 *
 * Benchmarks, not tests: each figure is a ratio measured side by side in this one run, because a shared
 * 2-core machine is too noisy for absolute numbers to mean much from one run to the next.
 */
import { parseArgs } from 'node:util';
import { airflowForwardBench } from './airflow-bench.js';
import { commitBench } from './commit-bench.js';
import { consumeLatency, consumerThroughput } from './consumer-bench.js';
import { bareRoundTripMs, e2eOncebox, e2eRawChain, fsyncMs, latency } from './e2e-bench.js';
import { backlogGrowth } from './growth-bench.js';
import { connectJetStream, IN_FLIGHT_EVENTS, jetStreamPublish } from './jetstream-bench.js';
import { postgresWalPerRequest, sqliteIngestInProcess, sqlitePagesPerRequest } from './store-pages.js';
import { PG_URL, pgHttpFloor, pgIngest, pgIngestGrowth, pgRawInsert, pgSmallRequests, sqliteIngest, sqliteRawInsert, type IngestRun } from './ingest-bench.js';
import { median, postgresMissing } from './support.js';
import { testingScenariosPerMinute } from './testing-bench.js';
import { waitersBench } from './waiters-bench.js';
import { catalogReadersBench } from './catalog-bench.js';

const SECTIONS = ['airflow', 'waiters', 'catalog', 'testing', 'growth', 'pages', 'pg'] as const;
const USAGE = `usage: npm run bench [-- --json] [-- --quick] [-- --only ${SECTIONS.join('|')}] [-- --require-peers]

  --json            print the figures as one JSON object on the last line too
  --quick           a fifth of the work and a 1M-key store, for a quick look (its ratios are not the full run's)
  --only SECTION    run one section alone
  --require-peers   fail, rather than skip, when NATS JetStream (measured side by side) is not running

PostgreSQL: ONCEBOX_TEST_PG (default postgres://postgres@127.0.0.1:5432/test). NATS: ONCEBOX_BENCH_NATS
(default 127.0.0.1:4222). docs/benchmarks.md says what each figure measures.`;

function parseOptions() {
  try {
    return parseArgs({
      options: {
        json: { type: 'boolean', default: false },
        quick: { type: 'boolean', default: false },
        only: { type: 'string' },
        // Fail, rather than skip, when a peer measured side by side (NATS JetStream) is not running.
        'require-peers': { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }).values;
  } catch (error) {
    console.error(`bench: ${(error as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
}

const values = parseOptions();
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
if (values.only !== undefined && !(SECTIONS as readonly string[]).includes(values.only)) {
  console.error(`bench: --only ${values.only}: no such section; use one of ${SECTIONS.join(', ')}\n\n${USAGE}`);
  process.exit(2);
}
// The full run and the PostgreSQL section need PostgreSQL; say so at once rather than minutes in.
if (values.only === undefined || values.only === 'pg') {
  const missing = await postgresMissing(PG_URL);
  if (missing !== null) {
    console.error(`bench: PostgreSQL is not reachable at ${PG_URL} (${missing}); start it, or set ONCEBOX_TEST_PG to its URL`);
    process.exit(2);
  }
}
const scale = values.quick ? 0.2 : 1;
const rounds = values.quick ? 3 : 5;

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const ratio = (n: number) => n.toFixed(2);

console.log(`oncebox bench (${values.quick ? 'quick' : 'full'}): node ${process.version}, ${rounds} interleaved rounds, medians`);

/** Into a real Airflow, when one is installed: the forwarder against a plain client, side by side. */
async function airflowSection(): Promise<Record<string, number | null>> {
  const run = await airflowForwardBench(values.quick ? 50 : 150, rounds);
  if (!run) {
    console.log('airflow forwarding: skipped (Airflow not installed; run airflow/install.sh)');
    return { airflow_forward_events_per_s: null, airflow_plain_events_per_s: null, airflow_forward_ratio_to_plain: null };
  }
  const forwardRatio = run.forwarderPerS / run.plainPerS;
  console.log(`airflow forwarding: forwarder ${fmt(run.forwarderPerS)} events/s, plain client ${fmt(run.plainPerS)} events/s, ratio ${ratio(forwardRatio)} (target >= 0.8)`);
  return {
    airflow_forward_events_per_s: Math.round(run.forwarderPerS),
    airflow_plain_events_per_s: Math.round(run.plainPerS),
    airflow_forward_ratio_to_plain: Number(forwardRatio.toFixed(3)),
  };
}

/** Publishing with 1,000 idle long-polls held open, against publishing with none, on both stores. */
async function waitersSection(): Promise<Record<string, number>> {
  const figures: Record<string, number> = {};
  for (const store of ['sqlite', 'postgres'] as const) {
    const run = await waitersBench(store, 1000, values.quick ? 100 : 300, values.quick ? 2 : 3);
    const over = run.waitingP50 / run.idleP50;
    console.log(`publish p50 with 1,000 idle waiters (${store}): ${run.waitingP50.toFixed(2)} ms, idle ${run.idleP50.toFixed(2)} ms, ratio ${ratio(over)} (target <= 1.5)`);
    figures[`publish_p50_ms_idle_${store}`] = Number(run.idleP50.toFixed(3));
    figures[`publish_p50_ms_with_1000_waiters_${store}`] = Number(run.waitingP50.toFixed(3));
    figures[`publish_waiters_ratio_${store}`] = Number(over.toFixed(3));
  }
  return figures;
}

if (values.only === 'waiters') {
  const figures = await waitersSection();
  if (values.json) console.log(JSON.stringify({ node: process.version, quick: values.quick, ...figures }));
  process.exit(0);
}

/** Publishing with 20 catalog readers looping over every consumer group's lag, against publishing alone, on both stores. */
async function catalogSection(): Promise<Record<string, number>> {
  const figures: Record<string, number> = {};
  for (const store of ['sqlite', 'postgres'] as const) {
    const run = await catalogReadersBench(store, {
      readers: 20,
      events: values.quick ? 20_000 : 100_000,
      groups: 200,
      publishes: values.quick ? 300 : 1000,
      rounds: values.quick ? 2 : 3,
    });
    const p50 = run.readP50 / run.aloneP50;
    const p99 = run.readP99 / run.aloneP99;
    console.log(
      `publish with 20 catalog readers looping over 200 groups' lag (${store}): p50 ${run.readP50.toFixed(2)} ms (alone ${run.aloneP50.toFixed(2)}), ratio ${ratio(p50)}; ` +
        `p99 ${run.readP99.toFixed(2)} ms (alone ${run.aloneP99.toFixed(2)}), ratio ${ratio(p99)} (targets <= 1.5); the readers got ${run.readsPerS.toFixed(1)} pages/s`,
    );
    figures[`catalog_publish_p50_ratio_${store}`] = Number(p50.toFixed(3));
    figures[`catalog_publish_p99_ratio_${store}`] = Number(p99.toFixed(3));
    figures[`catalog_publish_p50_ms_${store}`] = Number(run.readP50.toFixed(3));
    figures[`catalog_publish_p99_ms_${store}`] = Number(run.readP99.toFixed(3));
    figures[`catalog_reader_pages_per_s_${store}`] = Number(run.readsPerS.toFixed(1));
  }
  return figures;
}

if (values.only === 'catalog') {
  const figures = await catalogSection();
  if (values.json) console.log(JSON.stringify({ node: process.version, quick: values.quick, ...figures }));
  process.exit(0);
}

/** What a campaign of oncebox/testing costs (docs/testing.md). */
async function testingSection(): Promise<Record<string, number>> {
  const run = await testingScenariosPerMinute(values.quick ? 10 : 30, 20261202);
  console.log(`testing kit: ${run.perMinute.toFixed(1)} scenarios/min for examples/testing/ingest-job.ts (${run.runs} scenarios)`);
  return { testing_scenarios_per_min: Number(run.perMinute.toFixed(1)) };
}

if (values.only === 'testing') {
  const figures = await testingSection();
  if (values.json) console.log(JSON.stringify({ node: process.version, quick: values.quick, ...figures }));
  process.exit(0);
}

/** A backlog drained by `oncebox relay --drain` with its memory read, then a consumer catching up over it. */
async function growthSection(): Promise<Record<string, number>> {
  const rows = values.quick ? 200_000 : 1_000_000;
  const name = values.quick ? '200k' : '1m';
  const run = await backlogGrowth(rows);
  console.log(
    `backlog of ${fmt(rows)} rows: oncebox relay --drain at ${fmt(run.drainEventsPerS)} events/s, resident memory ${run.rssAtTenthMb.toFixed(0)} MiB at a tenth, ` +
      `peak ${run.rssPeakMb.toFixed(0)} MiB, growth ${run.rssGrowthMb.toFixed(0)} MiB (target <= 64); live heap after full collections ` +
      `${run.liveHeapGrowthMb === null ? 'not measured (none ran)' : `grew ${run.liveHeapGrowthMb.toFixed(1)} MiB over ${run.fullGcs}`}; ` +
      `a consumer caught up at ${fmt(run.consumerCatchUpPerS)} events/s`,
  );
  return {
    [`drain_${name}_events_per_s`]: Math.round(run.drainEventsPerS),
    [`drain_${name}_rss_at_tenth_mb`]: Number(run.rssAtTenthMb.toFixed(1)),
    [`drain_${name}_rss_peak_mb`]: Number(run.rssPeakMb.toFixed(1)),
    [`drain_${name}_rss_growth_mb`]: Number(run.rssGrowthMb.toFixed(1)),
    ...(run.liveHeapGrowthMb === null ? {} : { [`drain_${name}_live_heap_growth_mb`]: Number(run.liveHeapGrowthMb.toFixed(1)) }),
    [`consumer_catchup_${name}_events_per_s`]: Math.round(run.consumerCatchUpPerS),
  };
}

/** What one 500-event request writes in each store (bench/store-pages.ts). */
async function pagesSection(): Promise<Record<string, number | null>> {
  const sqlite = await sqlitePagesPerRequest('one run');
  const manyRuns = await sqlitePagesPerRequest('many runs');
  const unfiled = await sqlitePagesPerRequest('many runs, unfiled');
  // Side by side, in turns: the embedded store's own ingest rate with keys filed by run and without.
  const filedRates: number[] = [];
  const unfiledRates: number[] = [];
  for (let round = 0; round < 3; round++) {
    filedRates.push((await sqliteIngestInProcess('many runs', 200)).eventsPerS);
    unfiledRates.push((await sqliteIngestInProcess('many runs, unfiled', 200)).eventsPerS);
  }
  const ingestRatio = median(filedRates) / median(unfiledRates);
  const walKb = await postgresWalPerRequest(PG_URL, 'many runs');
  const walKbUnfiled = walKb === null ? null : await postgresWalPerRequest(PG_URL, 'many runs, unfiled');
  console.log(
    `SQLite store ingest in process, many runs: ${fmt(median(filedRates))} events/s with keys filed by run, ${fmt(median(unfiledRates))} without, ratio ${ratio(ingestRatio)}`,
  );
  console.log(
    `store writes per 500-event request: SQLite ${sqlite.pagesPerRequest.toFixed(0)} pages from one long run (${(sqlite.pagesPerRequest / 500).toFixed(2)} per event), ` +
      `${manyRuns.pagesPerRequest.toFixed(0)} from many runs (${unfiled.pagesPerRequest.toFixed(0)} with keys not filed by run, ratio ${ratio(manyRuns.pagesPerRequest / unfiled.pagesPerRequest)}); ` +
      (walKb === null || walKbUnfiled === null
        ? 'PostgreSQL not reachable'
        : `PostgreSQL ${walKb.toFixed(0)} KiB of WAL after a checkpoint, from many runs (${walKbUnfiled.toFixed(0)} with keys not filed by run, ratio ${ratio(walKb / walKbUnfiled)})`),
  );
  return {
    sqlite_pages_per_request: Number(sqlite.pagesPerRequest.toFixed(1)),
    sqlite_pages_per_request_many_runs: Number(manyRuns.pagesPerRequest.toFixed(1)),
    sqlite_pages_many_runs_ratio_to_unfiled: Number((manyRuns.pagesPerRequest / unfiled.pagesPerRequest).toFixed(3)),
    sqlite_ingest_many_runs_ratio_to_unfiled: Number(ingestRatio.toFixed(3)),
    pg_wal_kb_per_request: walKb === null ? null : Number(walKb.toFixed(1)),
    pg_wal_many_runs_ratio_to_unfiled: walKb === null || walKbUnfiled === null ? null : Number((walKb / walKbUnfiled).toFixed(3)),
  };
}

/**
 * Server ingest on PostgreSQL: 8 concurrent HTTP clients, 500 items per request, against raw batched
 * inserts. The four runs take turns, round after round, so that each sees the same machine; medians of each.
 */
async function pgIngestSection() {
  const ingestEvents = Math.round(60_000 * scale);
  const ingestRounds: Record<'raw' | 'floor' | 'one' | 'two', IngestRun[]> = { raw: [], floor: [], one: [], two: [] };
  for (let i = 0; i < rounds; i++) {
    ingestRounds.raw.push(await pgRawInsert(ingestEvents));
    ingestRounds.floor.push(await pgHttpFloor(ingestEvents));
    ingestRounds.one.push(await pgIngest(ingestEvents, 1));
    ingestRounds.two.push(await pgIngest(ingestEvents, 2));
  }
  const rate = (runs: IngestRun[]) => median(runs.map((run) => run.eventsPerS));
  const cores = (runs: IngestRun[]) =>
    runs.some((run) => run.coresBusy === null) ? null : Number(median(runs.map((run) => run.coresBusy!)).toFixed(2));
  const cpuPerEvent = (runs: IngestRun[]) =>
    runs.some((run) => run.serverCpuUsPerEvent === null) ? null : Number(median(runs.map((run) => run.serverCpuUsPerEvent!)).toFixed(1));
  const postgresPerEvent = (runs: IngestRun[]) =>
    runs.some((run) => run.postgresCpuUsPerEvent === null) ? null : Number(median(runs.map((run) => run.postgresCpuUsPerEvent!)).toFixed(1));
  const coresText = (runs: IngestRun[]) =>
    (cores(runs) === null ? '' : `, ${cores(runs)!.toFixed(2)} cores busy`) +
    (cpuPerEvent(runs) === null ? '' : `, ${cpuPerEvent(runs)} µs CPU per event (server side, ${postgresPerEvent(runs)} of it PostgreSQL)`);
  const pgRaw = rate(ingestRounds.raw);
  const pgFloor = rate(ingestRounds.floor);
  const pgOne = rate(ingestRounds.one);
  const pgTwo = rate(ingestRounds.two);
  console.log(`PostgreSQL raw INSERT … ON CONFLICT: ${fmt(pgRaw)} rows/s${coresText(ingestRounds.raw)}`);
  console.log(`  HTTP floor (parse + raw insert): ${fmt(pgFloor)} events/s${coresText(ingestRounds.floor)}, ratio to raw ${ratio(pgFloor / pgRaw)}`);
  console.log(`  oncebox, 1 instance:             ${fmt(pgOne)} events/s${coresText(ingestRounds.one)}, ratio to the floor ${ratio(pgOne / pgFloor)} (target >= 0.6), to raw ${ratio(pgOne / pgRaw)}`);
  const pgCpu = cpuPerEvent(ingestRounds.one);
  const floorCpu = cpuPerEvent(ingestRounds.floor);
  if (pgCpu !== null && floorCpu !== null) console.log(`  CPU per event, oncebox over the floor: ${ratio(pgCpu / floorCpu)} (target <= 1.6)`);
  console.log(`  oncebox, 2 instances:            ${fmt(pgTwo)} events/s${coresText(ingestRounds.two)}, over 1 instance ${ratio(pgTwo / pgOne)} (no target on 2 cores)`);
  const smallRuns: number[] = [];
  for (let i = 0; i < rounds; i++) smallRuns.push(await pgSmallRequests(16, values.quick ? 60 : 150));
  const pgSmall = median(smallRuns);
  console.log(`  one-event requests, 16 clients with a reader: ${fmt(pgSmall)} requests/s (no target; bounded by commits)`);
  return { pgOne, pgTwo, pgRaw, pgFloor, pgCpu, floorCpu, cores, postgresPerEvent, ingestRounds, pgSmall };
}

if (values.only === 'pg') {
  await pgIngestSection();
  process.exit(0);
}

for (const [only, section] of [['growth', growthSection], ['pages', pagesSection]] as const) {
  if (values.only !== only) continue;
  const figures = await section();
  if (values.json) console.log(JSON.stringify({ node: process.version, quick: values.quick, ...figures }));
  process.exit(0);
}

if (values.only === 'airflow') {
  const figures = await airflowSection();
  if (values.json) console.log(JSON.stringify({ node: process.version, quick: values.quick, ...figures }));
  process.exit(0);
}

const commit1 = await commitBench(1, Math.round(4000 * scale), 200);
console.log(`commit, 1 emission per commit:    oncebox ${fmt(commit1.onceboxRowsPerS)} commits/s, raw ${fmt(commit1.rawRowsPerS)} commits/s, ratio ${ratio(commit1.ratio)} (target >= 0.87, i.e. within 1.15x)`);
console.log(`  pages written per commit:        oncebox ${commit1.onceboxPages.toFixed(1)}, raw ${commit1.rawPages.toFixed(1)}`);
const commit100 = await commitBench(100, Math.round(200_000 * scale), 100);
console.log(`commit, 100 emissions per commit: oncebox ${fmt(commit100.onceboxRowsPerS)} rows/s, raw ${fmt(commit100.rawRowsPerS)} rows/s, ratio ${ratio(commit100.ratio)} (target >= 0.87)`);
console.log(`  pages written per commit:        oncebox ${commit100.onceboxPages.toFixed(1)}, raw ${commit100.rawPages.toFixed(1)}`);

const events = Math.round(50_000 * scale);
const e2e: number[] = [];
const raw: number[] = [];
// The consumer's rate, and the broker a user would pick instead, are measured in the same rounds, so that
// their ratios to the producer's end to end are side by side.
const consumed: number[] = [];
const jetstream: number[] = [];
const nats = await connectJetStream();
if ('missing' in nats) {
  if (values['require-peers']) throw new Error(`bench --require-peers: ${nats.missing}`);
  console.log(`NATS JetStream side by side: skipped (${nats.missing}; start nats-server -js, or set ONCEBOX_BENCH_NATS)`);
}
for (let i = 0; i < Math.max(2, rounds - 2); i++) {
  raw.push(e2eRawChain(events));
  e2e.push(await e2eOncebox(events));
  if ('nc' in nats) jetstream.push(await jetStreamPublish(nats.nc, events));
  consumed.push(await consumerThroughput(events));
}
if ('nc' in nats) await nats.nc.close();
const e2eRate = median(e2e);
const rawRate = median(raw);
const jetstreamRate = jetstream.length > 0 ? median(jetstream) : null;
console.log(`end to end, ${fmt(events)} events:  oncebox ${fmt(e2eRate)} events/s delivered, raw chain ${fmt(rawRate)} events/s, ratio ${ratio(e2eRate / rawRate)} (target >= 1.0)`);
if (jetstreamRate !== null) {
  console.log(
    `  NATS JetStream, the same events with Nats-Msg-Id, ${fmt(IN_FLIGHT_EVENTS)} in flight: ${fmt(jetstreamRate)} msg/s acknowledged, ` +
      `oncebox over it ${ratio(e2eRate / jetstreamRate)} (target >= 1.0)`,
  );
}

const consumerRate = median(consumed);
console.log(`consumer, ${fmt(events)} events in batches: ${fmt(consumerRate)} events/s processed, ratio to the producer's end to end ${ratio(consumerRate / e2eRate)} (target >= 1.0)`);
const consumeLat = await consumeLatency(values.quick ? 100 : 300);
console.log(`commit to consumer handler (long-poll): p50 ${consumeLat.p50.toFixed(2)} ms (target <= 5), p99 ${consumeLat.p99.toFixed(2)} ms (target <= 25)`);

const lat = await latency(values.quick ? 100 : 300);
const fsync = fsyncMs(values.quick ? 100 : 300);
const roundTrip = await bareRoundTripMs(values.quick ? 100 : 300);
// The physical floor of commit to receipt: the producer's durable commit, a bare loopback round trip, and
// the server's durable commit, each measured in this run.
const latencyFloor = 2 * fsync + roundTrip;
console.log(
  `commit-to-receipt latency:         p50 ${lat.p50.toFixed(2)} ms, over its floor ${ratio(lat.p50 / latencyFloor)} (target <= 1.5), p99 ${lat.p99.toFixed(2)} ms (target <= 10); ` +
    `floor ${latencyFloor.toFixed(2)} ms = two durable commits (fsync ${fsync.toFixed(2)} ms each) + a bare loopback round trip ${roundTrip.toFixed(2)} ms`,
);

const { pgOne, pgTwo, pgRaw, pgFloor, pgCpu, floorCpu, cores, postgresPerEvent, ingestRounds, pgSmall } = await pgIngestSection();
const ingestEvents = Math.round(60_000 * scale);
const sqliteRaw = sqliteRawInsert(ingestEvents);
const sqliteOne = (await sqliteIngest(ingestEvents)).eventsPerS;
console.log(`SQLite store ingest:               ${fmt(sqliteOne)} events/s, raw better-sqlite3 ${fmt(sqliteRaw)} rows/s, ratio ${ratio(sqliteOne / sqliteRaw)}`);
const bigStore = values.quick ? 1_000_000 : 10_000_000;
const growth = await pgIngestGrowth(Math.round(20_000 * scale) + 10_000, 10_000, bigStore, values.quick ? 1 : 3);
const atSmall = growth.small;
const atBig = growth.large;
console.log(`PostgreSQL ingest as the store grows: ${fmt(atSmall)} events/s at 10k keys, ${fmt(atBig)} at ${fmt(bigStore)} keys, ratio ${ratio(atBig / atSmall)} (target >= 0.7)`);

const pageFigures = await pagesSection();
const growthFigures = await growthSection();
const waiterFigures = await waitersSection();
const catalogFigures = await catalogSection();
const airflowFigures = await airflowSection();
const testingFigures = await testingSection();

if (values.json) {
  console.log(
    JSON.stringify({
      node: process.version,
      quick: values.quick,
      commit1_oncebox_per_s: Math.round(commit1.onceboxRowsPerS),
      commit1_raw_per_s: Math.round(commit1.rawRowsPerS),
      commit1_ratio_to_raw: Number(commit1.ratio.toFixed(3)),
      commit100_oncebox_rows_per_s: Math.round(commit100.onceboxRowsPerS),
      commit100_raw_rows_per_s: Math.round(commit100.rawRowsPerS),
      commit100_ratio_to_raw: Number(commit100.ratio.toFixed(3)),
      commit1_pages_per_commit: Number(commit1.onceboxPages.toFixed(1)),
      commit1_raw_pages_per_commit: Number(commit1.rawPages.toFixed(1)),
      commit100_pages_per_commit: Number(commit100.onceboxPages.toFixed(1)),
      commit100_raw_pages_per_commit: Number(commit100.rawPages.toFixed(1)),
      e2e_events_per_s: Math.round(e2eRate),
      raw_chain_events_per_s: Math.round(rawRate),
      e2e_ratio_to_raw_chain: Number((e2eRate / rawRate).toFixed(3)),
      jetstream_msgs_per_s: jetstreamRate === null ? null : Math.round(jetstreamRate),
      e2e_ratio_to_jetstream: jetstreamRate === null ? null : Number((e2eRate / jetstreamRate).toFixed(3)),
      consumer_events_per_s: Math.round(consumerRate),
      consumer_ratio_to_e2e: Number((consumerRate / e2eRate).toFixed(3)),
      consume_latency_p50_ms: Number(consumeLat.p50.toFixed(2)),
      consume_latency_p99_ms: Number(consumeLat.p99.toFixed(2)),
      latency_p50_ms: Number(lat.p50.toFixed(3)),
      latency_p99_ms: Number(lat.p99.toFixed(3)),
      fsync_ms: Number(fsync.toFixed(3)),
      latency_p50_over_fsync: Number((lat.p50 / fsync).toFixed(3)),
      bare_round_trip_ms: Number(roundTrip.toFixed(3)),
      latency_floor_ms: Number(latencyFloor.toFixed(3)),
      latency_p50_over_floor: Number((lat.p50 / latencyFloor).toFixed(3)),
      pg_ingest_events_per_s: Math.round(pgOne),
      pg_two_instances_events_per_s: Math.round(pgTwo),
      pg_raw_rows_per_s: Math.round(pgRaw),
      pg_http_floor_events_per_s: Math.round(pgFloor),
      pg_http_floor_ratio_to_raw: Number((pgFloor / pgRaw).toFixed(3)),
      pg_ingest_ratio_to_http_floor: Number((pgOne / pgFloor).toFixed(3)),
      pg_cores_busy_raw: cores(ingestRounds.raw),
      pg_cores_busy_one_instance: cores(ingestRounds.one),
      pg_cores_busy_two_instances: cores(ingestRounds.two),
      pg_ingest_ratio_to_raw: Number((pgOne / pgRaw).toFixed(3)),
      pg_cpu_us_per_event: pgCpu,
      pg_http_floor_cpu_us_per_event: floorCpu,
      pg_postgres_cpu_us_per_event: postgresPerEvent(ingestRounds.one),
      pg_http_floor_postgres_cpu_us_per_event: postgresPerEvent(ingestRounds.floor),
      pg_cpu_ratio_to_http_floor: pgCpu === null || floorCpu === null ? null : Number((pgCpu / floorCpu).toFixed(3)),
      pg_two_instances_speedup: Number((pgTwo / pgOne).toFixed(3)),
      pg_small_requests_per_s: Math.round(pgSmall),
      sqlite_ingest_events_per_s: Math.round(sqliteOne),
      sqlite_raw_rows_per_s: Math.round(sqliteRaw),
      sqlite_ingest_ratio_to_raw: Number((sqliteOne / sqliteRaw).toFixed(3)),
      ingest_store_keys_large: bigStore,
      ingest_10m_over_10k: Number((atBig / atSmall).toFixed(3)),
      ...pageFigures,
      ...growthFigures,
      ...waiterFigures,
      ...catalogFigures,
      ...airflowFigures,
      ...testingFigures,
    }),
  );
}
