import { createRequire } from 'node:module';
import type { Counter, Histogram, Registry } from 'prom-client';
import type { SettledRow } from './events.js';

/** What a metrics source reads from one open outbox at scrape time. */
export interface OutboxGauges {
  producer: string;
  pending(): number;
  dead(): number;
}

interface Shared {
  sources: Set<OutboxGauges>;
  delivered: Counter<'producer'>;
  deadTotal: Counter<'producer' | 'code'>;
  latency: Histogram<'producer'>;
}

const byRegistry = new WeakMap<Registry, Shared>();

/**
 * The producer's Prometheus metrics, in a registry the application owns (`openOutbox({ metrics })`).
 * Several outboxes of one process share the metrics of one registry, told apart by `producer`.
 * @internal
 */
export class OutboxMetrics {
  private readonly shared: Shared;

  constructor(
    registry: Registry,
    private readonly source: OutboxGauges,
  ) {
    this.shared = byRegistry.get(registry) ?? createShared(registry);
    this.shared.sources.add(source);
  }

  settled(rows: readonly SettledRow[], now: number): void {
    const producer = this.source.producer;
    for (const row of rows) {
      if (row.state === 'delivered') {
        this.shared.delivered.inc({ producer });
        if (row.committedAt !== undefined) this.shared.latency.observe({ producer }, Math.max(0, now - row.committedAt) / 1000);
      } else {
        this.shared.deadTotal.inc({ producer, code: row.code });
      }
    }
  }

  /** The outbox closed: its gauges no longer read its file. */
  detach(): void {
    this.shared.sources.delete(this.source);
  }
}

// Loaded when a job asks for metrics, not by every job that starts: prom-client is the slowest part of a job's start.
const load = createRequire(import.meta.url);

function createShared(registry: Registry): Shared {
  const { Counter, Gauge, Histogram } = load('prom-client') as typeof import('prom-client');
  const sources = new Set<OutboxGauges>();
  const gauge = (name: string, help: string, read: (source: OutboxGauges) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['producer'],
      registers: [registry],
      collect() {
        this.reset();
        for (const source of sources) this.inc({ producer: source.producer }, read(source));
      },
    });
  gauge('oncebox_outbox_pending', 'Rows (emissions and checkpoint updates) waiting in the outbox file to be delivered.', (source) => source.pending());
  gauge('oncebox_outbox_dead', 'Emissions parked as dead in the outbox file; each needs oncebox dead retry or discard.', (source) => source.dead());
  const shared: Shared = {
    sources,
    delivered: new Counter({ name: 'oncebox_outbox_delivered_total', help: 'Emissions the server acknowledged, duplicates included.', labelNames: ['producer'], registers: [registry] }),
    deadTotal: new Counter({ name: 'oncebox_outbox_dead_total', help: 'Emissions parked as dead, by the reason code.', labelNames: ['producer', 'code'], registers: [registry] }),
    latency: new Histogram({
      name: 'oncebox_outbox_delivery_latency_seconds',
      help: 'Time from commit to the server acknowledging the emission.',
      labelNames: ['producer'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600],
      registers: [registry],
    }),
  };
  byRegistry.set(registry, shared);
  return shared;
}
