import { OutboxFile } from '../outbox/outbox-file.js';
import { Relay, RELAY_DEFAULTS } from '../outbox/relay.js';
import { HttpTransport } from '../outbox/transport.js';

/**
 * How often a relay in its own process looks for commits. The job's commits happen in another process,
 * so no in-process wake-up reaches it; `PRAGMA data_version` changes whenever another connection
 * commits, and reading it costs microseconds.
 */
const COMMIT_WATCH_MS = 25;

export interface RelayCommandOptions {
  db: string;
  servers: string[];
  token?: string | undefined;
  /** Exit once nothing is pending, instead of running until a signal. */
  drain: boolean;
  signal: AbortSignal;
}

/** `oncebox relay`: delivers an outbox file that a job (opened with relay: 'external') commits to. */
export async function runRelay(options: RelayCommandOptions): Promise<number> {
  const file = new OutboxFile(options.db, 'full', false);
  const relay = new Relay(file, {
    ...RELAY_DEFAULTS,
    transport: new HttpTransport({ servers: options.servers, token: options.token, requestTimeoutMs: RELAY_DEFAULTS.requestTimeoutMs }),
    now: Date.now,
  });
  relay.start();
  let lastVersion = file.db.pragma('data_version', { simple: true });
  const watch = setInterval(() => {
    const version = file.db.pragma('data_version', { simple: true });
    if (version !== lastVersion) {
      lastVersion = version;
      relay.notify();
    }
  }, COMMIT_WATCH_MS);
  try {
    if (options.drain) {
      while (!options.signal.aborted && !(await relay.drain(1000))) {
        if (relay.failure) break;
      }
    } else {
      await new Promise<void>((resolve) => options.signal.addEventListener('abort', () => resolve(), { once: true }));
    }
  } finally {
    clearInterval(watch);
    await relay.stop();
  }
  const failure = relay.failure;
  file.close();
  if (failure) {
    console.error(`oncebox relay: stopped: ${failure.message} [${failure.code}]`);
    return 1;
  }
  return 0;
}
