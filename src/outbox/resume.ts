import type { OutboxFile } from './file/outbox-file.js';
import type { ServerClient } from '../client/server-client.js';
import { CredentialsError, ResumeUnavailableError } from '../protocol/errors.js';
import type { StreamState } from '../protocol/wire.js';
import { HELD_CHECKPOINT, restoreHeld } from './commit/held-mirror.js';
import { runKeyOf, wireTask, type RunContext } from './run.js';

/**
 * When a retry takes the server's copy of its run's checkpoints:
 * - 'fresh-file' (default): only when this file holds nothing of the run and no checkpoint: a retry on
 *   a new machine. A file with its own progress trusts it; its leftover rows are delivered first.
 * - 'server-newer': also when the file has rows of the run, but the server holds rows of a later
 *   attempt than any in the file (another machine got further since). The file's own state of the run
 *   is then what a fresh-file retry finds of its lost file: nothing. What the file had not delivered is
 *   dropped (the later attempt resumed from before it, so its work is done again from the server's
 *   checkpoints), and its checkpoints and held emissions are the server's.
 * - 'never'.
 */
export type ResumePolicy = 'fresh-file' | 'server-newer' | 'never';

export interface ResumeOptions {
  file: OutboxFile;
  producer: string;
  run: RunContext;
  /** The highest attempt of this run whose rows the file held when this one opened it; undefined for none. */
  lastWriter: number | undefined;
  /** The servers, tried in turn until one answers. */
  client: ServerClient;
  policy: ResumePolicy;
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
  const fresh = lastWriter === undefined && file.checkpoints.runHasCheckpoint.get(runKeyOf(run)) === undefined;
  if (!fresh && policy === 'fresh-file') return undefined;

  const state = await fetchStreamState(options);
  if (!state) return undefined;
  if (!fresh && !deliveredPast(state, run.attempt, lastWriter)) return undefined;
  const now = Date.now();
  file.db
    .transaction(() => {
      if (!fresh) {
        // Nothing of this attempt has gone out (its relay starts after this), so the rows it took over
        // from older attempts at open can go without a gap in its positions, but for its predecessors'
        // lifecycle notices: facts about them that no resume does again.
        file.rows.dropUndelivered.run({ ...runKeyOf(run), attempt: run.attempt });
        // What stays (the lifecycle notices of earlier attempts) goes out first, numbered from 1. Each row
        // moves down or stays, in stream order, so no two share a position on the way.
        let seq = 1;
        for (const { id } of file.rows.pendingOfAttempt.all({ ...runKeyOf(run), attempt: run.attempt })) file.rows.takeOver.run({ id, attempt: run.attempt, seq: seq++ });
        file.checkpoints.forgetRun.run(runKeyOf(run));
        file.terminal.forgetHeldOfRun.run(runKeyOf(run));
      }
      for (const [name, value] of Object.entries(state.checkpoints)) {
        file.checkpoints.setCheckpoint.run({ ...runKeyOf(run), name, value: JSON.stringify(value), now });
      }
      // What the lost file held for the run's success comes back with the checkpoints.
      restoreHeld(file, run, state.checkpoints[HELD_CHECKPOINT], now);
      file.meta.write('resumed', { epoch: state.epoch, attempt: run.attempt, at: new Date(now).toISOString() });
    })
    .immediate();
  return state;
}

/**
 * Whether the server holds rows of an attempt later than any in the file, other than `attempt` itself.
 * Not the epoch: a claimed attempt raised it to `attempt` before this reads it, and a claim delivers
 * nothing to resume from. Not when the server holds rows of `attempt` already: then what this file
 * took over has gone out (a relay of its own), and it is this attempt's to finish.
 */
function deliveredPast(state: StreamState, attempt: number, lastWriter: number | undefined): boolean {
  const delivered = state.attempts.filter((a) => a.lastSeq > 0).map((a) => a.attempt);
  return !delivered.includes(attempt) && delivered.some((a) => a > (lastWriter ?? 0) && a !== attempt);
}

async function fetchStreamState(options: ResumeOptions): Promise<StreamState | undefined> {
  const { run } = options;
  try {
    return await options.client.streamState(options.producer, run.runId, wireTask(run.task), options.resumeTimeoutMs);
  } catch (error) {
    if (error instanceof CredentialsError) throw error;
    throw new ResumeUnavailableError(
      `attempt ${run.attempt} of run ${run.runId} could not read its stream state: ${(error as Error).message}. Without it a retry ` +
        "on a fresh machine would start from scratch. Make the server reachable, or pass resume: 'never' to start from this " +
        "file's own checkpoints",
      { cause: error },
    );
  }
}
