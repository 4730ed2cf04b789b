import { CredentialsError, ResumeUnavailableError } from '../protocol/errors.js';
import type { AttemptClaim } from '../protocol/wire.js';
import { ServerClient } from '../client/server-client.js';
import { OutboxFile } from './file/outbox-file.js';
import { resolveOutboxOptions, type ClaimedOptions, type OutboxOptions, type ResolvedOutboxOptions } from './options.js';
import { Outbox } from './outbox.js';
import { runKeyOf, wireTask } from './run.js';

/*
 * Opening an outbox: the wiring, done once. The file, the one client for the server, the attempt
 * (claimed when asked), the Outbox with its relay (assembled in relay/assemble.ts, as `oncebox relay`
 * assembles its own), the resume from the server, and the relay's start.
 */

/** How often a claim from an AttemptSource is tried again above the epoch before openOutbox gives up. */
const SOURCE_CLAIM_TRIES = 10;

/**
 * Claims the run's attempt when the options ask for one. 'claim' takes the server's next attempt, at
 * least one above every attempt this file has seen, so that a server that lost its state cannot hand out
 * a number the file would refuse as a zombie's. An AttemptSource proposes numbers above what the file
 * and the server have seen, and each is claimed exactly: one the epoch has reached is refused, and the
 * source is asked again above it. What the source throws comes out as it is.
 */
async function claimAttempt(options: ResolvedOutboxOptions & { servers: string[] }, file: OutboxFile, client: ServerClient | undefined): Promise<ClaimedOptions> {
  const { run } = options;
  if (run === undefined || typeof run.attempt === 'number') return options as ClaimedOptions;
  const seen = file.runs.highestSeen(runKeyOf(run));
  // The options' check made sure a claimed attempt comes with a server.
  const server = client!;
  const claim = async (wanted: AttemptClaim) => {
    try {
      return await server.claimAttempt(options.producer, run.runId, wireTask(run.task), wanted, options.resumeTimeoutMs);
    } catch (error) {
      if (error instanceof CredentialsError) throw error;
      throw new ResumeUnavailableError(
        `run ${run.runId} could not claim its attempt from the server: ${(error as Error).message}. Make the server reachable, ` +
          'or pass a number as run.attempt',
        { cause: error },
      );
    }
  };
  const source = run.attempt;
  let floor = seen;
  for (let tries = 0; tries < (source === 'claim' ? 1 : SOURCE_CLAIM_TRIES); tries++) {
    const answer = await claim(source === 'claim' ? { atLeast: seen + 1 } : { exactly: await source.next(floor) });
    if ('attempt' in answer) return { ...options, run: { ...run, attempt: answer.attempt } };
    if (answer.refused === 'attempt_too_high') {
      throw new ResumeUnavailableError(`run ${run.runId} could not claim its attempt: ${answer.detail}`);
    }
    floor = Math.max(floor, answer.epoch);
  }
  throw new ResumeUnavailableError(
    `run ${run.runId} could not claim its attempt: ${SOURCE_CLAIM_TRIES} numbers from its attempt source were taken by the time ` +
      'each reached the server; another process is claiming attempts of this run as fast',
  );
}

/** Opens (creating if needed) an outbox file and, by default, starts its relay. */
export async function openOutbox(options: OutboxOptions): Promise<Outbox> {
  return openResolvedOutbox(resolveOutboxOptions(options));
}

/**
 * @internal Opens the file, claims the run's attempt when asked to, resumes from the server when the
 * policy says so, and starts the relay.
 */
export async function openResolvedOutbox(options: ResolvedOutboxOptions & { servers: string[] }): Promise<Outbox> {
  const file = new OutboxFile(options.path, options.durability);
  // The one client for the server, for claiming, resuming and delivering; none without a server.
  const client = options.servers.length === 0 ? undefined : new ServerClient({ servers: options.servers, token: options.token, requestTimeoutMs: options.requestTimeoutMs });
  let box: Outbox;
  try {
    box = new Outbox(await claimAttempt(options, file, client), file, client);
  } catch (error) {
    file.close();
    throw error;
  }
  try {
    await box.start();
    if (options.noteFenced) box.noteFencedPredecessor();
  } catch (error) {
    await box.close({ timeoutMs: 0 });
    throw error;
  }
  return box;
}
