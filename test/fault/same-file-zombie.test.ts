import fc from 'fast-check';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runScript, startScript, type ChildResult, type StartedScript } from '../support/child.js';
import { seededPlan } from '../support/plan.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const JOB = 'examples/batch-ingest.ts';
const BATCHES = 32;
const ROUNDS = 8;
const partition = (batch: number) => `batch-${String(batch).padStart(4, '0')}`;

/**
 * A zombie and its retry on the same machine, sharing one outbox file: real processes, real timing.
 * Attempt 1 runs on; attempt 2 opens the same file part-way through; in some rounds attempt 2 is
 * SIGKILLed too and attempt 3 finishes on the same file. The random choices come from one printed seed.
 */
const { plan } = seededPlan(
  'same-file zombie rounds',
  fc.array(
    fc.record({
      retryAfterBatch: fc.integer({ min: 1, max: 6 }),
      // Either may be the faster: a zombie that is ahead of its retry is the case that once lost a batch.
      // The zombie is slow enough to be still running when its retry opens the file (a process start).
      zombiePauseMs: fc.integer({ min: 30, max: 60 }),
      retryPauseMs: fc.integer({ min: 0, max: 100 }),
      killRetryAfterBatch: fc.option(fc.integer({ min: 1, max: BATCHES }), { nil: undefined }),
      // In-process: each job's relay delivers while it holds the lease. External: one `oncebox relay`
      // process delivers for both jobs, so the zombie goes on committing while the retry's rows go out.
      relay: fc.constantFrom('in-process', 'external'),
    }),
    { minLength: ROUNDS, maxLength: ROUNDS },
  ),
);

describe('a zombie and its retry on one outbox file, in real processes', () => {
  it(`publishes every batch once, in order, over ${ROUNDS} rounds of random timing`, async () => {
    const server = await startServer();
    const dir = tempDir();
    for (const [round, choices] of plan.entries()) {
      const runId = `round-${round}`;
      const db = join(dir, `${runId}.db`);
      const args = (attempt: number, pauseMs: number) => [
        '--db', db, '--server', server.url, '--data', join(dir, runId), '--run-id', runId,
        '--attempt', String(attempt), '--batches', String(BATCHES), '--pause-ms', String(pauseMs), '--relay', choices.relay,
      ];
      let retry: Promise<ChildResult> | undefined;
      let relay: StartedScript | undefined;
      const zombie = await runScript(JOB, args(1, choices.zombiePauseMs), {
        onLine: (line) => {
          if (line.event === 'start' && choices.relay === 'external') {
            relay = startScript('src/cli/main.ts', ['relay', '--db', db, '--server', server.url]);
          }
          if (line.event !== 'committed' || line.batch !== choices.retryAfterBatch) return;
          retry = runScript(JOB, args(2, choices.retryPauseMs), {
            onLine: (retryLine, kill) => {
              if (retryLine.event === 'committed' && retryLine.batch === choices.killRetryAfterBatch) kill();
            },
          });
        },
      });
      const context = `round ${round} ${JSON.stringify(choices)}`;
      // Fenced (3), or done (0) when it finished before the retry opened the file.
      expect([0, 3], `${context}: zombie ${zombie.stderr}`).toContain(zombie.code);
      const second = await retry!;
      if (second.signal === 'SIGKILL') {
        const third = await runScript(JOB, args(3, 0));
        expect(third.code, `${context}: attempt 3 ${JSON.stringify(third.lines.slice(-3))} ${third.stderr}`).toBe(0);
      } else {
        expect(second.code, `${context}: attempt 2 ${JSON.stringify(second.lines.slice(-3))} ${second.stderr}`).toBe(0);
      }
      relay?.signal('SIGTERM');
      expect((await relay?.done)?.code ?? 0, `${context}: relay ${(await relay?.done)?.stderr}`).toBe(0);
      const events = (await server.events()).filter((event) => event.runId === runId);
      expect(events.map((event) => event.partitionKey), context).toEqual(Array.from({ length: BATCHES }, (_, i) => partition(i + 1)));
      const attempts = events.map((event) => event.attempt);
      expect(attempts, `${context}: no zombie event after its retry delivered`).toEqual([...attempts].sort((a, b) => a - b));
    }
  }, 240_000);
});
