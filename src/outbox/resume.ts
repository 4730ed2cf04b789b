import pRetry from 'p-retry';
import { ResumeUnavailableError } from '../protocol/errors.js';
import type { StreamState } from '../protocol/wire.js';
import type { OutboxFile } from './outbox-file.js';
import type { RunContext } from './options.js';
import { apiUrl } from './transport.js';

/**
 * When a retry takes the server's copy of its run's checkpoints:
 * - 'fresh-file' (default): only when this file holds nothing of the run and no checkpoint: a retry on
 *   a new machine. A file with its own progress trusts it; its leftover rows are delivered first.
 * - 'server-newer': also when the file has rows of the run, but the server has seen a later attempt
 *   than any in the file (another machine got further since).
 * - 'never'.
 */
export type ResumePolicy = 'fresh-file' | 'server-newer' | 'never';

export interface ResumeOptions {
  file: OutboxFile;
  producer: string;
  run: RunContext;
  /** The highest attempt of this run whose rows the file held when this one opened it; undefined for none. */
  lastWriter: number | undefined;
  /** Tried in turn until one answers. */
  servers: readonly string[];
  token?: string | undefined;
  policy: ResumePolicy;
  requestTimeoutMs: number;
  /** How long to keep trying to reach the server before giving up with ResumeUnavailableError. */
  resumeTimeoutMs: number;
}

/**
 * Before a retry (attempt > 1) starts, adopt the server's mirror of the run's checkpoints when the
 * policy says so. The job then resumes from there; the batches it re-processes derive the keys they had,
 * and the server answers them with the original receipts.
 *
 * @returns the state adopted, or undefined when nothing was.
 * @internal
 */
export async function resumeFromServer(options: ResumeOptions): Promise<StreamState | undefined> {
  const { file, run, policy, lastWriter } = options;
  if (policy === 'never' || run.attempt === 1) return undefined;
  const fresh = lastWriter === undefined && file.statements.anyCheckpoint.get() === undefined;
  if (!fresh && policy === 'fresh-file') return undefined;

  const state = await fetchStreamState(options);
  if (!state) return undefined;
  if (!fresh && lastWriter !== undefined && state.epoch <= lastWriter) return undefined;
  const now = Date.now();
  file.db
    .transaction(() => {
      for (const [name, value] of Object.entries(state.checkpoints)) {
        file.statements.setCheckpoint.run({ name, value: JSON.stringify(value), now });
      }
      file.setMeta('resumed', JSON.stringify({ epoch: state.epoch, attempt: run.attempt, at: new Date(now).toISOString() }));
    })
    .immediate();
  return state;
}

async function fetchStreamState(options: ResumeOptions): Promise<StreamState | undefined> {
  const { run } = options;
  const urls = options.servers.map((server) => {
    const url = apiUrl(server, `v1/streams/${encodeURIComponent(options.producer)}/${encodeURIComponent(run.runId)}`);
    if (run.task !== undefined) url.searchParams.set('task', run.task);
    return url;
  });
  const url = urls[0]!;
  const headers: Record<string, string> = options.token === undefined ? {} : { authorization: `Bearer ${options.token}` };
  try {
    return await pRetry(
      async (attemptNumber) => {
        const target = urls[(attemptNumber - 1) % urls.length]!;
        const response = await fetch(target, { headers, signal: AbortSignal.timeout(options.requestTimeoutMs) });
        if (response.status === 404) return undefined;
        if (!response.ok) throw new Error(`${target} answered ${response.status}: ${(await response.text()).slice(0, 200)}`);
        return (await response.json()) as StreamState;
      },
      { retries: Number.POSITIVE_INFINITY, minTimeout: 100, maxTimeout: 2000, randomize: true, maxRetryTime: options.resumeTimeoutMs },
    );
  } catch (error) {
    throw new ResumeUnavailableError(
      `attempt ${run.attempt} of run ${run.runId} could not read its stream state from ${url} within ${options.resumeTimeoutMs} ms ` +
        `(${(error as Error).message}); without it a retry on a fresh machine would start from scratch. Make the server reachable, ` +
        "or pass resume: 'never' to start from this file's own checkpoints",
      { cause: error },
    );
  }
}
