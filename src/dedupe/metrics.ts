import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ItemResult } from '../protocol/wire.js';
import { LAG_COUNT_CAP, type ConsumerGroup } from '../protocol/catalog.js';
import type { CompactionResult, StoreSizes } from './store.js';

/** The most consumer groups the lag gauge has a series for: a label per group must not grow without bound. */
export const MAX_LAG_SERIES = 1000;
/** How often the lag gauge's figures are counted again, at most: a scrape reads the last count. */
export const LAG_METRICS_EVERY_MS = 15_000;

const SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/**
 * The server's Prometheus metrics, served at `GET /metrics`. Labels take few values (routes as
 * declared, item results, rejection codes), so that a hostile client cannot grow the series.
 */
export class ServerMetrics {
  readonly registry: Registry;
  private readonly requests: Counter<'method' | 'route' | 'status'>;
  private readonly requestSeconds: Histogram<'route'>;
  private readonly items: Counter<'result' | 'code'>;
  private readonly ingestSeconds: Histogram;
  private readonly compactions: Counter;
  private readonly removed: Counter<'kind'>;
  private readonly longPollsRefused: Counter<'reason'>;

  constructor(
    registry: Registry = new Registry(),
    { sizes, waiting, consumers }: { sizes?: () => Promise<StoreSizes>; waiting?: () => number; consumers?: () => Promise<readonly ConsumerGroup[]> } = {},
  ) {
    this.registry = registry;
    // A registry the application shares may already have the process metrics.
    if (registry.getSingleMetric('process_cpu_user_seconds_total') === undefined) collectDefaultMetrics({ register: registry });
    const registers = [registry];
    this.requests = new Counter({
      name: 'oncebox_http_requests_total',
      help: 'HTTP requests answered, by method, route (as declared; unmatched for none) and status.',
      labelNames: ['method', 'route', 'status'],
      registers,
    });
    this.requestSeconds = new Histogram({ name: 'oncebox_http_request_duration_seconds', help: 'Time to answer a request, by route.', labelNames: ['route'], buckets: SECONDS, registers });
    this.items = new Counter({
      name: 'oncebox_ingest_items_total',
      help: 'Items of POST /v1/emissions by result (accepted, duplicate, checkpointed, rejected, conflict, gap, fenced), and the code of a rejection.',
      labelNames: ['result', 'code'],
      registers,
    });
    this.ingestSeconds = new Histogram({ name: 'oncebox_ingest_duration_seconds', help: "Time the store's ingest transaction took for one batch.", buckets: SECONDS, registers });
    if (sizes) {
      const gauge = (name: string, help: string, pick: (sizes: StoreSizes) => number) =>
        new Gauge({
          name,
          help,
          registers,
          async collect() {
            this.set(pick(await sizes()));
          },
        });
      gauge('oncebox_events_stored', 'Events the store holds (an estimate on PostgreSQL).', (s) => s.events);
      gauge('oncebox_dedupe_records', 'Dedupe records the store holds (an estimate on PostgreSQL).', (s) => s.dedupeRecords);
    }
    if (waiting) {
      new Gauge({
        name: 'oncebox_event_readers_waiting',
        help: 'Readers of GET /v1/events waiting for a new event (?wait=) on this instance.',
        registers,
        collect() {
          this.set(waiting());
        },
      });
    }
    if (consumers) {
      new Gauge({
        name: 'oncebox_consumer_lag_events',
        help: `Events of a consumer group's assets after its cursor, per group (the first ${MAX_LAG_SERIES} groups by name; counted up to ${LAG_COUNT_CAP}, at most every ${LAG_METRICS_EVERY_MS / 1000} s).`,
        labelNames: ['producer', 'group'],
        registers,
        async collect() {
          // Groups that went away leave no stale series behind.
          this.reset();
          for (const group of await consumers()) if (group.lag !== null) this.set({ producer: group.producer, group: group.group }, group.lag);
        },
      });
    }
    this.longPollsRefused = new Counter({
      name: 'oncebox_event_reads_refused_total',
      help: 'Waiting reads (GET /v1/events?wait=) refused, by reason: token (its share, 429) or total (the instance, 503).',
      labelNames: ['reason'],
      registers,
    });
    this.compactions = new Counter({ name: 'oncebox_compactions_total', help: 'Compaction runs.', registers });
    this.removed = new Counter({
      name: 'oncebox_compacted_rows_total',
      help: 'Rows compaction removed past their retention, by kind (dedupe_records, events, outcomes, streams).',
      labelNames: ['kind'],
      registers,
    });
  }

  answered(method: string, route: string | undefined, status: number, seconds: number): void {
    const label = route ?? 'unmatched';
    this.requests.inc({ method, route: label, status: String(status) });
    this.requestSeconds.observe({ route: label }, seconds);
  }

  ingested(results: readonly ItemResult[], seconds: number): void {
    this.ingestSeconds.observe(seconds);
    for (const result of results) this.items.inc({ result: result.status, code: result.status === 'rejected' ? result.code : '' });
  }

  waitRefused(reason: 'token' | 'total'): void {
    this.longPollsRefused.inc({ reason });
  }

  compactedRows(result: CompactionResult): void {
    this.compactions.inc();
    this.removed.inc({ kind: 'dedupe_records' }, result.dedupeRecords);
    this.removed.inc({ kind: 'events' }, result.events);
    this.removed.inc({ kind: 'outcomes' }, result.outcomes);
    this.removed.inc({ kind: 'streams' }, result.streams);
  }
}
