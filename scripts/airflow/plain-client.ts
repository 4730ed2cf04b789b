import { setTimeout as sleep } from 'node:timers/promises';
import { AirflowClient, OutcomeUnknown } from '../../src/airflow/airflow-client.js';
import { assetEventBody } from '../../src/airflow/event-body.js';
import type { StoredEvent } from '../../src/protocol/wire.js';

/**
 * The control: what a careful client without the forwarder's lookup does. It posts each event, and
 * after an answer that leaves the outcome unknown it posts again, as any retrying HTTP client would.
 * Airflow has no idempotency key, so each lost answer after a commit becomes a second asset event.
 */
export async function postPlainly(client: AirflowClient, assetId: number, events: readonly StoredEvent[], retryDelayMs = 200): Promise<{ posts: number }> {
  let posts = 0;
  for (const event of events) {
    for (;;) {
      posts++;
      try {
        await client.postAssetEvent(assetEventBody(event, assetId));
        break;
      } catch (error) {
        if (!(error instanceof OutcomeUnknown)) throw error;
        await sleep(retryDelayMs);
      }
    }
  }
  return { posts };
}
