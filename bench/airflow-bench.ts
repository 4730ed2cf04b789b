import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep, setImmediate as yieldToRelay } from 'node:timers/promises';
import { AirflowClient } from '../src/airflow/airflow-client.js';
import { openAirflowForwarder } from '../src/airflow/index.js';
import { openOutbox } from '../src/outbox/index.js';
import { airflowInstalled, startAirflow } from '../scripts/airflow/harness.js';
import { postPlainly } from '../scripts/airflow/plain-client.js';
import { allEvents } from '../scripts/events.js';
import { benchDir, median, startServerProcess } from './support.js';

export interface AirflowForwardRun {
  forwarderPerS: number;
  plainPerS: number;
}

/**
 * Events per second into a real Airflow: the forwarder (an oncebox consumer: a fetch per page, a post
 * and a durable SQLite commit of its receipt and cursor per event, the cursor mirrored to the server)
 * against a plain client posting the same events one after another, with no lookup and no record. The
 * two take turns, round after round, on the same Airflow; no faults, so the forwarder's lookup runs
 * only once, at its start. Undefined when Airflow is not installed.
 */
export async function airflowForwardBench(events: number, rounds: number): Promise<AirflowForwardRun | undefined> {
  if (!airflowInstalled()) return undefined;
  const dir = benchDir();
  const home = mkdtempSync(join(tmpdir(), 'oncebox-bench-airflow-'));
  const server = await startServerProcess(dir);
  const airflow = await startAirflow({ name: 'bench', dir: home });
  try {
    const credentials = { username: airflow.username, password: airflow.password };
    const forwarder = await openAirflowForwarder({
      path: join(dir, 'forwarder.db'),
      server: server.url,
      airflow: airflow.url,
      credentials,
      map: { batch_ready: 'bench_forwarded' },
    });
    const plain = new AirflowClient({ url: airflow.url, credentials });
    const plainAsset = await airflow.admin.assetId('bench_plain');
    const box = await openOutbox({ path: join(dir, 'producer.db'), server: server.url, producer: 'bench', run: { workflow: 'w', runId: 'r', attempt: 1 } });
    const forwarded: number[] = [];
    const posted: number[] = [];
    for (let round = 0; round < rounds; round++) {
      // The round's events are all on the server before either clock starts.
      for (let n = 0; n < events; n++) {
        box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: `round-${round}-${n}` }));
        await yieldToRelay();
      }
      while (box.status().pending > 0) await sleep(20);
      const roundEvents = await allEvents(server.url, { after: forwarder.cursor });

      const stop = new AbortController();
      const target = roundEvents.at(-1)!.cursor;
      let started = performance.now();
      await forwarder.run({ signal: stop.signal, onForwarded: (receipt) => receipt.cursor >= target && stop.abort() });
      forwarded.push(events / ((performance.now() - started) / 1000));

      started = performance.now();
      await postPlainly(plain, plainAsset, roundEvents);
      posted.push(events / ((performance.now() - started) / 1000));
    }
    await box.close();
    await forwarder.close();
    return { forwarderPerS: median(forwarded), plainPerS: median(posted) };
  } finally {
    await airflow.stop();
    await server.stop();
    rmSync(home, { recursive: true, force: true });
  }
}
