import { connect, nanos, StorageType, type NatsConnection } from 'nats';
import { deriveKey } from '../src/outbox/commit/keys.js';
import { RELAY_DEFAULTS } from '../src/outbox/relay/defaults.js';

/** Where `npm run bench` looks for the peer a user would pick instead: NATS with JetStream. */
export const NATS_URL = process.env.ONCEBOX_BENCH_NATS ?? '127.0.0.1:4222';

/**
 * As many events in flight as oncebox's relay allows itself by default (its window of batches times the
 * rows in a batch), so that neither side wins by waiting less for its acknowledgements.
 */
export const IN_FLIGHT_EVENTS = RELAY_DEFAULTS.maxInFlight * RELAY_DEFAULTS.batchMaxRows;

/** A connection to the local NATS with JetStream enabled, or why there is none. */
export async function connectJetStream(): Promise<{ nc: NatsConnection } | { missing: string }> {
  try {
    const nc = await connect({ servers: NATS_URL, timeout: 2000 });
    try {
      await (await nc.jetstreamManager()).getAccountInfo();
    } catch (error) {
      await nc.close();
      return { missing: `NATS at ${NATS_URL} has no JetStream (${String(error)})` };
    }
    return { nc };
  } catch (error) {
    return { missing: `no NATS at ${NATS_URL} (${String(error)})` };
  }
}

/**
 * Messages per second JetStream stores and acknowledges: the same events as oncebox's end to end (the
 * same body a relay sends, the same derived key as `Nats-Msg-Id`, so JetStream deduplicates them as
 * oncebox's server does), published with at most IN_FLIGHT_EVENTS unacknowledged, into a file-backed
 * stream with a two-minute duplicate window. No producer-side durability: what a job would publish
 * directly, which a crash between its own commit and the publish loses, or a retry sends twice after the
 * window.
 */
export async function jetStreamPublish(nc: NatsConnection, events: number): Promise<number> {
  const suffix = `${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
  const stream = `ONCEBOX_BENCH_${suffix}`;
  const subject = `oncebox.bench.${suffix}`;
  const jsm = await nc.jetstreamManager();
  await jsm.streams.add({ name: stream, subjects: [subject], storage: StorageType.File, duplicate_window: nanos(120_000) });
  try {
    const js = nc.jetstream();
    const encoder = new TextEncoder();
    const messages = Array.from({ length: events }, (_, i) => {
      const partitionKey = `p-${i}`;
      const key = deriveKey({ producer: 'bench', workflow: 'w', runId: stream, task: 't', asset: 'batch_ready', partitionKey, position: null, occurrence: 0 });
      return { key, data: encoder.encode(JSON.stringify({ seq: i + 1, key, kind: 'event', asset: 'batch_ready', partitionKey, extra: { rows: i % 100 } })) };
    });
    const started = performance.now();
    let next = 0;
    let duplicates = 0;
    // IN_FLIGHT_EVENTS publishers, each awaiting its acknowledgement before it takes the next message.
    await Promise.all(
      Array.from({ length: Math.min(IN_FLIGHT_EVENTS, events) }, async () => {
        while (next < messages.length) {
          const message = messages[next++]!;
          const ack = await js.publish(subject, message.data, { msgID: message.key });
          if (ack.duplicate) duplicates++;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    if (duplicates !== 0) throw new Error(`jetstream bench: ${duplicates} of ${events} distinct messages were answered as duplicates`);
    return events / seconds;
  } finally {
    await jsm.streams.delete(stream);
  }
}
