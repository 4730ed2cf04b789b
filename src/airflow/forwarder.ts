import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { openConsumer, type Consumer, type ConsumerStatus } from '../consumer/consumer.js';
import { failpoint } from '../failpoints/failpoints.js';
import { defaultLogger, loggerSchema, type OutboxLogger } from '../client/logger.js';
import { serversSchema } from '../client/server-urls.js';
import { FailureStreak } from '../client/failure-streak.js';
import { resolveOptions } from '../protocol/options.js';
import type { Same } from '../protocol/same-type.js';
import { nameSchema, type StoredEvent } from '../protocol/wire.js';
import { AirflowClient, OutcomeUnknown, type AirflowAsset, type AirflowAssetEvent, type AirflowCredentials } from './airflow-client.js';
import { AirflowError, AirflowErrorCode } from './errors.js';
import { assetEventBody, forwardedKey, partitionKeyProblem } from './event-body.js';
import { parseAssetMap, resolveAssetMap, type AirflowAssetMap } from './asset-map.js';
import { forwardStatements, type ForwardReceipt, type ForwardStatements } from './receipts.js';

const credentialsSchema = z.union([
  z.strictObject({ username: z.string().min(1), password: z.string().min(1) }),
  z.strictObject({ token: z.string().min(1) }),
]);

/** Validates AirflowForwarderOptions: each option is documented once, there; `Same` below ties the two. */
const forwarderOptionsSchema = z.strictObject({
  path: z.string().min(1),
  server: serversSchema,
  airflow: z.url({ protocol: /^https?$/, error: 'must be the http(s) URL of Airflow\'s API server, e.g. "http://127.0.0.1:8080"' }),
  credentials: credentialsSchema,
  map: z.record(z.string(), z.unknown()),
  group: nameSchema.default('airflow-forwarder'),
  batchSize: z.number().int().min(1).max(1000).default(20),
  token: z.string().min(1).optional(),
  readToken: z.string().min(1).optional(),
  requestTimeoutMs: z.number().int().min(1).default(10_000),
  settleMs: z.number().int().min(0).default(1_000),
  clockSkewMs: z.number().int().min(0).default(300_000),
  retryMaxDelayMs: z.number().int().min(1).default(5_000),
  waitSeconds: z.number().min(0.1).max(30).default(10),
  logger: loggerSchema.optional(),
});

/** What `openAirflowForwarder` takes. */
export interface AirflowForwarderOptions {
  /** The forwarder's SQLite file: its cursor and its forward receipts. Created if missing. */
  path: string;
  /** The oncebox server, or several instances over one PostgreSQL database. */
  server: string | string[];
  /** Airflow's API server, e.g. http://127.0.0.1:8080. */
  airflow: string;
  /** A user of Airflow's auth manager (the token is renewed before it expires), or a token issued elsewhere. */
  credentials: AirflowCredentials;
  /** Which oncebox asset goes to which Airflow asset: see `readAssetMap`. */
  map: AirflowAssetMap;
  /** The consumer group: one cursor, one live forwarder (a later one fences it). @defaultValue 'airflow-forwarder' */
  group?: string | undefined;
  /**
   * Events posted between two durable commits of their receipts. A crash loses at most this many
   * receipts, and the restart finds those events in Airflow by lookup. @defaultValue 20
   */
  batchSize?: number | undefined;
  /** A publish token of the group on the oncebox server (for the cursor mirror and the epoch claim). */
  token?: string | undefined;
  /** A read token, when `token` cannot read events. @defaultValue token */
  readToken?: string | undefined;
  /** How long one request (to oncebox or Airflow) may take before its outcome counts as unknown. @defaultValue 10000 */
  requestTimeoutMs?: number | undefined;
  /**
   * After an answer that leaves a post's outcome unknown, how long to wait before looking for the event
   * in Airflow: a request Airflow is still working on gets that long to commit. @defaultValue 1000
   */
  settleMs?: number | undefined;
  /** How far Airflow's clock may be behind the oncebox server's; the lookup searches that far back. @defaultValue 300000 */
  clockSkewMs?: number | undefined;
  /** The longest pause between retries while Airflow gives no answer. @defaultValue 5000 */
  retryMaxDelayMs?: number | undefined;
  /** How long one long-poll for new events waits, in seconds. @defaultValue 10 */
  waitSeconds?: number | undefined;
  /** Where the forwarder logs what you must act on. @defaultValue JSON lines on stderr */
  logger?: OutboxLogger | undefined;
}
const forwarderOptionsAreDocumented: Same<Omit<AirflowForwarderOptions, 'map'>, Omit<z.input<typeof forwarderOptionsSchema>, 'map'>> = true;
void forwarderOptionsAreDocumented;

export interface ForwardRunResult {
  /** Events forwarded by this run: posted, or found already in Airflow. */
  forwarded: number;
  /** Of those, how many a lookup found in Airflow (posted by an earlier try whose answer was lost). */
  found: number;
  /** Lookups made: after a lost answer, and at start until the first event Airflow does not have. */
  lookups: number;
}

export interface ForwarderStatus extends ConsumerStatus {
  /** Events forwarded, as recorded in the file. */
  forwarded: number;
  /** Since this forwarder opened: lookups made in Airflow, and events they found there (posted before an answer was lost). */
  lookups: number;
  found: number;
  /** The last error talking to Airflow, while it lasts; null once Airflow answers again. */
  lastAirflowError: string | null;
}

/**
 * Forwards oncebox events into Airflow as asset events, each exactly once: an oncebox consumer whose
 * effect is a post to `POST /api/v2/assets/events`, recorded as a forward receipt in the same SQLite
 * transaction as its cursor. Airflow has no idempotency key, so after any answer that leaves a post's
 * outcome unknown, the forwarder looks for the event in Airflow (by the oncebox key in its `extra`)
 * before posting again. Create it with `openAirflowForwarder`.
 */
export class AirflowForwarder {
  private readonly statements: ForwardStatements;
  private readonly airflowFailures: FailureStreak;
  /**
   * Whether the next event may have been posted by an earlier forwarder (or an earlier run) of this group
   * whose receipt was never committed. True at the start of a run; false from the first event Airflow does
   * not have: a forwarder posts in cursor order, one event at a time, each only once the one before is
   * in Airflow, so what an earlier one posted is a prefix of the events after the cursor it left.
   */
  private mayBePosted = true;
  private readonly tally = { forwarded: 0, found: 0, lookups: 0 };

  /** @internal Use openAirflowForwarder. */
  constructor(
    private readonly consumer: Consumer,
    private readonly airflow: AirflowClient,
    private readonly assets: ReadonlyMap<string, AirflowAsset>,
    private readonly options: z.output<typeof forwarderOptionsSchema>,
  ) {
    this.statements = forwardStatements(consumer.db);
    this.airflowFailures = new FailureStreak(options.logger ?? defaultLogger(), { group: options.group });
  }

  /** The attempt this forwarder claimed: a later forwarder of the group fences it. */
  get epoch(): number {
    return this.consumer.epoch;
  }

  get cursor(): number {
    return this.consumer.cursor;
  }

  /** The Airflow asset each oncebox asset goes to, as resolved at start. */
  get resolvedAssets(): ReadonlyMap<string, AirflowAsset> {
    return this.assets;
  }

  status(): ForwarderStatus {
    return { ...this.consumer.status(), forwarded: this.statements.count(), lookups: this.tally.lookups, found: this.tally.found, lastAirflowError: this.airflowFailures.lastError };
  }

  /** Every forward receipt in the file, in cursor order. */
  receipts(): ForwardReceipt[] {
    return this.statements.all();
  }

  /**
   * Forwards events until `signal` aborts. Rejects with FencedError once a later forwarder of the group
   * has taken over, and with an AirflowError when Airflow refuses for good (credentials, a rejected
   * event): that event is not marked forwarded and is tried again by the next run.
   */
  async run(options: { signal?: AbortSignal | undefined; onForwarded?: (receipt: ForwardReceipt) => void } = {}): Promise<ForwardRunResult> {
    const before = { ...this.tally };
    // Whatever ended an earlier run may have left posts unrecorded in the batch it was in.
    this.mayBePosted = true;
    const result = () => ({ forwarded: this.tally.forwarded - before.forwarded, found: this.tally.found - before.found, lookups: this.tally.lookups - before.lookups });
    try {
      await this.consumer.run(
        async (events, ctx) => {
          // Posted one at a time, in cursor order, and recorded together: one durable commit per batch. A
          // crash before that commit leaves posted events unrecorded, and the restart finds them by lookup.
          const receipts: ForwardReceipt[] = [];
          for (const event of events) {
            const { airflowEvent, found } = await this.forward(event, options.signal);
            receipts.push(receiptOf(event, airflowEvent, found));
          }
          ctx.commit(() => {
            for (const receipt of receipts) this.statements.record(receipt);
          });
          for (const receipt of receipts) {
            this.tally.forwarded++;
            if (receipt.foundByLookup) this.tally.found++;
            options.onForwarded?.(receipt);
          }
        },
        { batch: true, signal: options.signal },
      );
    } catch (error) {
      // Stopped while waiting out an unknown outcome: the batch in hand stays unrecorded, for the next run to look up.
      if (!(options.signal?.aborted && (error as Error).name === 'AbortError')) throw error;
    }
    return result();
  }

  close(options: { timeoutMs?: number } = {}) {
    return this.consumer.close(options);
  }

  /** Gets one event into Airflow exactly once: looks first when it may be there already, and after every unknown outcome. */
  private async forward(event: StoredEvent, signal?: AbortSignal): Promise<{ airflowEvent: AirflowAssetEvent; found: boolean }> {
    const asset = this.assets.get(event.asset)!;
    for (let failures = 0; ; failures++) {
      try {
        if (this.mayBePosted) {
          this.tally.lookups++;
          const existing = await this.airflow.findAssetEvent(asset.id, this.lookupSince(event), (candidate) => forwardedKey(candidate) === event.key);
          if (existing) {
            this.recovered();
            return { airflowEvent: existing, found: true };
          }
          this.mayBePosted = false;
        }
        // Refused here, before a post Airflow would answer with a bare 422.
        const problem = partitionKeyProblem(event);
        if (problem !== undefined) throw new AirflowError(AirflowErrorCode.Rejected, `${problem}. The forwarder stops at this event.`, { field: 'partitionKey' });
        // From here until the answer, Airflow may commit the event: any failure leaves it unknown.
        this.mayBePosted = true;
        failpoint('forward:before-post');
        const posted = await this.airflow.postAssetEvent(assetEventBody(event, asset.id));
        failpoint('forward:after-post');
        this.mayBePosted = false;
        this.recovered();
        return { airflowEvent: posted, found: false };
      } catch (error) {
        if (!(error instanceof OutcomeUnknown)) throw error;
        this.failed(error);
        // A request Airflow is still working on gets time to commit before the lookup looks for it.
        const pause = Math.max(this.options.settleMs, Math.min(this.options.retryMaxDelayMs, 100 * 2 ** failures));
        await sleep(pause, undefined, { signal });
      }
    }
  }

  /** Airflow stamps an event when it takes it, after oncebox stored it: the window starts there, less the clock skew allowed. */
  private lookupSince(event: StoredEvent): Date {
    return new Date(Date.parse(event.timestamp) - this.options.clockSkewMs);
  }

  private failed(error: OutcomeUnknown): void {
    this.airflowFailures.failed('airflow_outcome_unknown', `oncebox forwarder ${this.options.group}: ${error.message}; looking for the event in Airflow before posting again`);
  }

  private recovered(): void {
    this.airflowFailures.recovered('airflow_answering', `oncebox forwarder ${this.options.group}: Airflow answers again`);
  }
}

function receiptOf(event: StoredEvent, airflowEvent: AirflowAssetEvent, found: boolean): ForwardReceipt {
  return {
    eventId: event.eventId,
    cursor: event.cursor,
    key: event.key,
    asset: event.asset,
    partitionKey: event.partitionKey,
    airflowAssetId: airflowEvent.asset_id,
    airflowEventId: airflowEvent.id,
    createdDagruns: airflowEvent.created_dagruns.map(({ dag_id, run_id }) => ({ dagId: dag_id, runId: run_id })),
    foundByLookup: found,
    forwardedAt: new Date().toISOString(),
  };
}

/**
 * Opens a forwarder: signs in to Airflow and resolves every mapped asset (a wrong password, an
 * unreachable Airflow or an unknown asset is an error here, before anything is consumed), then opens its
 * consumer. Then call `run`.
 */
export async function openAirflowForwarder(options: AirflowForwarderOptions): Promise<AirflowForwarder> {
  const resolved = resolveOptions(forwarderOptionsSchema, options, 'openAirflowForwarder');
  const map = parseAssetMap(resolved.map);
  const airflow = new AirflowClient({ url: resolved.airflow, credentials: resolved.credentials, requestTimeoutMs: resolved.requestTimeoutMs });
  try {
    await airflow.signIn();
    const assets = await resolveAssetMap(airflow, map);
    const consumer = await openConsumer({
      path: resolved.path,
      server: resolved.server,
      group: resolved.group,
      assets: [...assets.keys()],
      batchSize: resolved.batchSize,
      token: resolved.token,
      readToken: resolved.readToken,
      requestTimeoutMs: resolved.requestTimeoutMs,
      retryMaxDelayMs: resolved.retryMaxDelayMs,
      waitSeconds: resolved.waitSeconds,
      logger: resolved.logger,
    });
    return new AirflowForwarder(consumer, airflow, assets, resolved);
  } catch (error) {
    // At start nothing was posted, so an unknown outcome is only an Airflow that does not answer.
    if (error instanceof OutcomeUnknown) {
      throw new AirflowError(AirflowErrorCode.Unreachable, `cannot ${error.message}; is Airflow's API server running there?`, { cause: error });
    }
    throw error;
  }
}
