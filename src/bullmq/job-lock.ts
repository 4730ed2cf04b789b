import type { Job, Worker } from 'bullmq';

/** The field of a job's Redis hash that holds the last oncebox attempt handed out for it. */
export const ATTEMPT_FIELD = 'oncebox:attempt';

/**
 * Raises the job's oncebox attempt counter, but only while the caller's token holds the job's lock
 * (unless ARGV[3] is '0'), and to above ARGV[2]. One script, so no hand-out can slip between the check
 * and the raise: the numbers follow the order in which BullMQ handed the job out.
 * KEYS: job hash, job lock. ARGV: token, floor, lock required ('1' or '0').
 * Returns the attempt, -1 when the lock is not the caller's, -2 when the job is gone.
 */
const TAKE_ATTEMPT = `
if ARGV[3] == '1' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
local attempt = redis.call('HINCRBY', KEYS[1], '${ATTEMPT_FIELD}', 1)
local floor = tonumber(ARGV[2])
if attempt <= floor then
  attempt = floor + 1
  redis.call('HSET', KEYS[1], '${ATTEMPT_FIELD}', attempt)
end
return attempt`;

/**
 * Whether the caller's token holds the job's lock, and if so BullMQ's counts of the job's finished tries
 * and of its stalls, as they are now in Redis. KEYS: job hash, job lock. ARGV: token.
 * Returns { tries, stalls }, or { -1, -1 }.
 */
const LOCK_STATE = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return { -1, -1 } end
return { tonumber(redis.call('HGET', KEYS[1], 'atm') or '0'), tonumber(redis.call('HGET', KEYS[1], 'stc') or '0') }`;

/** A job's counters as BullMQ keeps them, read while holding its lock. */
export interface LockState {
  /** Tries BullMQ counted as finished (`attemptsMade`). */
  attemptsMade: number;
  /** Times BullMQ took the job back from a worker that lost its lock (`stalledCounter`). */
  stalls: number;
}

const TAKE_ATTEMPT_COMMAND = 'onceboxTakeAttempt';
const LOCK_STATE_COMMAND = 'onceboxLockState';

/**
 * A worker's view of the BullMQ lock on each job it was handed, read from Redis: who holds the job now,
 * and the attempt counter that orders its hand-outs. BullMQ moves a lock only forward (a hand-out sets
 * a fresh token; an expired one is never renewed), so the token that holds the lock belongs to the
 * latest hand-out. That is what lets the lock decide which worker's attempt wins.
 * @internal
 */
export class JobLocks {
  private readonly defined = new WeakSet<object>();

  constructor(private readonly worker: Worker) {}

  /**
   * The next oncebox attempt of this hand-out, above `floor`, or undefined when its token no longer
   * holds the job's lock (another worker was handed the job since) or the job is gone.
   */
  async takeAttempt(job: Job, token: string, floor: number): Promise<number | undefined> {
    const answer = Number(await this.run(TAKE_ATTEMPT_COMMAND, [...this.keys(job), token, String(floor), '1']));
    return answer > 0 ? answer : undefined;
  }

  /**
   * An attempt above `floor` for a job that no worker holds any more (BullMQ failed it without running
   * the processor): taken without the lock, it is still above every hand-out's, so it fences them all.
   */
  async takeAttemptUnlocked(job: Job, floor: number): Promise<number | undefined> {
    const answer = Number(await this.run(TAKE_ATTEMPT_COMMAND, [...this.keys(job), '', String(floor), '0']));
    return answer > 0 ? answer : undefined;
  }

  /**
   * BullMQ's counts of the job's finished tries and of its stalls, read now, while `token` holds its
   * lock; undefined once it does not.
   */
  async held(job: Job, token: string): Promise<LockState | undefined> {
    const [tries, stalls] = (await this.run(LOCK_STATE_COMMAND, [...this.keys(job), token])) as [number, number];
    return Number(tries) >= 0 ? { attemptsMade: Number(tries), stalls: Number(stalls) } : undefined;
  }

  private keys(job: Job): [string, string] {
    const jobKey = this.worker.toKey(job.id!);
    return [jobKey, `${jobKey}:lock`];
  }

  private async run(command: string, args: string[]): Promise<unknown> {
    const client = await this.worker.client;
    // A reconnect may hand out a new client, which knows no script of ours yet.
    if (!this.defined.has(client)) {
      client.defineCommand(TAKE_ATTEMPT_COMMAND, { numberOfKeys: 2, lua: TAKE_ATTEMPT });
      client.defineCommand(LOCK_STATE_COMMAND, { numberOfKeys: 2, lua: LOCK_STATE, readOnly: true });
      this.defined.add(client);
    }
    return client.runCommand(command, args);
  }
}
