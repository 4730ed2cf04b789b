import pRetry from 'p-retry';
import { fetchWithin } from '../client/fetch-within.js';
import { OnceboxError } from '../protocol/errors.js';
import { LifecycleAsset, type LifecycleExtra } from '../protocol/lifecycle.js';
import type { StoredEvent } from '../protocol/wire.js';
import { openConsumer, type Consumer, type ConsumerOptions, type RunResult } from './consumer.js';

/** One run outcome, as a notifier gets it. */
export interface LifecycleNotice {
  outcome: 'succeeded' | 'failed' | 'fenced';
  /**
   * The lifecycle event's key: the same for every delivery of this notice. Pass it on as the idempotency
   * key (the webhook notifier sends it as `Idempotency-Key`), so that the receiver acts on it once.
   */
  key: string;
  producer: string;
  workflow: string;
  runId: string;
  task: string | null;
  /**
   * For a failure, the attempt that failed; for a fence, the attempt fenced; for a success, which names no
   * attempt (a run succeeds once), the attempt that delivered it: a retry that took over its
   * predecessor's undelivered success on the same file delivers it as its own.
   */
  attempt: number;
  /** For a fence: the attempt that superseded it. */
  fencedBy?: number | undefined;
  /** Why the attempt failed, as `box.fail(error)` was given it. */
  error?: { message: string; code?: string } | undefined;
  /** For a failure: whether the runner retries the run (true) or it failed for good (false). */
  willRetry?: boolean | undefined;
  event: StoredEvent;
}

/**
 * Told each run outcome once per lifecycle event: a run's success once, each failed attempt's failure
 * once, and each attempt that never ended (killed, or stalled and taken over) once its successor opened
 * the same outbox file.
 */
export interface Notifier {
  onSuccess?(notice: LifecycleNotice): unknown;
  onFailure?(notice: LifecycleNotice): unknown;
  onFenced?(notice: LifecycleNotice): unknown;
}

export interface NotifierOptions extends Omit<ConsumerOptions, 'assets' | 'group'> {
  /** The consumer group: one cursor over the lifecycle events. @defaultValue 'oncebox-notifiers' */
  group?: string | undefined;
  notifiers: Notifier[];
  /** Only the outcomes of these producers' runs; all of them when left out. */
  producers?: string[] | undefined;
}

/**
 * Runs notifiers over the lifecycle events, through an oncebox consumer: each event is handed to every
 * notifier before the cursor moves past it, so a crash repeats a notice (with the same key) rather than
 * losing it. A notifier that throws stops `run`, and the event is handed over again by the next run.
 */
export class Notifiers {
  /** @internal Use openNotifiers. */
  constructor(
    private readonly consumer: Consumer,
    private readonly options: NotifierOptions,
  ) {}

  get cursor(): number {
    return this.consumer.cursor;
  }

  run(options: { signal?: AbortSignal | undefined } = {}): Promise<RunResult> {
    return this.consumer.run(async (event) => {
      if (this.options.producers && !this.options.producers.includes(event.producer)) return;
      const notice = noticeOf(event);
      for (const notifier of this.options.notifiers) {
        if (notice.outcome === 'succeeded') await notifier.onSuccess?.(notice);
        else if (notice.outcome === 'failed') await notifier.onFailure?.(notice);
        else await notifier.onFenced?.(notice);
      }
    }, options);
  }

  close(options: { timeoutMs?: number } = {}) {
    return this.consumer.close(options);
  }
}

export async function openNotifiers(options: NotifierOptions): Promise<Notifiers> {
  const { notifiers, producers, group, ...consumerOptions } = options;
  const consumer = await openConsumer({ ...consumerOptions, group: group ?? 'oncebox-notifiers', assets: [LifecycleAsset.Succeeded, LifecycleAsset.Failed, LifecycleAsset.Fenced] });
  return new Notifiers(consumer, { ...options, notifiers, producers });
}

function noticeOf(event: StoredEvent): LifecycleNotice {
  const extra = (event.extra ?? {}) as Partial<LifecycleExtra>;
  return {
    outcome: event.asset === LifecycleAsset.Succeeded ? 'succeeded' : event.asset === LifecycleAsset.Failed ? 'failed' : 'fenced',
    key: event.key,
    producer: event.producer,
    workflow: event.workflow,
    runId: event.runId,
    task: event.task,
    // A fence is recorded by the attempt that superseded the fenced one, which its extra names.
    attempt: extra.attempt ?? event.attempt,
    error: extra.error,
    willRetry: extra.willRetry,
    fencedBy: extra.fencedBy,
    event,
  };
}

export interface WebhookOptions {
  url: string;
  /** Headers sent with every notice, e.g. an authorization. */
  headers?: Record<string, string> | undefined;
  /** @defaultValue 10000 */
  timeoutMs?: number | undefined;
  /** Tries after the first for a notice the receiver did not take (no answer, 429 or 5xx). @defaultValue 5 */
  retries?: number | undefined;
}

/** The receiver refused a notice for good (a 4xx other than 408 and 429): sending it again will not help. */
export class WebhookRefusedError extends OnceboxError {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super('webhook_refused', message);
  }
}

/**
 * A notifier that POSTs each notice as JSON to `url`, with the lifecycle event's key in an
 * `Idempotency-Key` header: a notice sent again (after a crash, or a retry here) carries the same key.
 */
export function webhookNotifier(options: WebhookOptions): Notifier {
  const send = async (notice: LifecycleNotice) => {
    const { event: _event, ...body } = notice;
    await pRetry(
      async () => {
        const { response } = await fetchWithin(
          options.url,
          {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': notice.key, ...options.headers },
            body: JSON.stringify({ ...body, eventId: notice.event.eventId, timestamp: notice.event.timestamp }),
          },
          options.timeoutMs ?? 10_000,
        );
        if (response.ok) return;
        const message = `webhook ${options.url} answered ${response.status} to the ${notice.outcome} notice of run ${notice.runId}`;
        if (response.status === 408 || response.status === 429 || response.status >= 500) throw new Error(message);
        throw new WebhookRefusedError(response.status, `${message}; fix the receiver, then run the notifiers again`);
      },
      { retries: options.retries ?? 5, minTimeout: 200, maxTimeout: 5_000, shouldRetry: ({ error }) => !(error instanceof WebhookRefusedError) },
    );
  };
  return { onSuccess: send, onFailure: send, onFenced: send };
}
