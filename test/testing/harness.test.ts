import { describe, expect, it } from 'vitest';
import { orderTotals } from '../../examples/testing/order-totals.js';
import { CONSUMER_POINTS, PRODUCER_POINTS, runScenario, type JobUnderTest } from '../../src/testing/index.js';

/**
 * The testing kit's harness does what its scenarios say: each kill point kills the job there (through
 * oncebox's own failpoints), a zombie is stopped there and goes on later, a fresh machine gets a new file,
 * and a correct job's history stays clean through all of it.
 */
const ingest: JobUnderTest = { command: 'examples/testing/ingest-job.ts', producer: 'orders-ingest', assets: ['batch_ready', 'ingest_done'] };

describe('the testing kit’s harness', () => {
  it.each(PRODUCER_POINTS)('kills a producer at %s, and the retry leaves a clean history', { timeout: 240_000 }, async (at) => {
    const outcome = await runScenario(ingest, { attempts: [{ machine: 'same', end: { kind: 'killed', at, hit: 1 } }], network: [] });
    expect(outcome.attempts[0]).toMatchObject({ attempt: 1, planned: 'killed', reachedPoint: true, signal: 'SIGKILL' });
    expect(outcome.attempts[1]).toMatchObject({ attempt: 2, exitCode: 0 });
    expect(outcome.anomalies, outcome.report).toEqual([]);
  });

  it.each(CONSUMER_POINTS.filter((point) => point.startsWith('consumer')))('kills a consumer at %s, and the retry leaves a clean history', { timeout: 240_000 }, async (at) => {
    const outcome = await runScenario(orderTotals('examples/testing/consumer-job.ts'), { attempts: [{ machine: 'same', end: { kind: 'killed', at, hit: 2 } }], network: [] });
    expect(outcome.attempts[0]).toMatchObject({ reachedPoint: true, signal: 'SIGKILL' });
    expect(outcome.anomalies, outcome.report).toEqual([]);
  });

  it('stops a zombie at its point, lets its retry on a fresh machine run, then continues it; the zombie is fenced and the history clean', { timeout: 240_000 }, async () => {
    const outcome = await runScenario(ingest, {
      attempts: [
        { machine: 'same', end: { kind: 'zombie', at: 'after-commit', hit: 2, resume: 'after-next' } },
        { machine: 'fresh', end: { kind: 'completes' } },
      ],
      network: ['drop-response', 'duplicate'],
    });
    expect(outcome.attempts[0]).toMatchObject({ attempt: 1, planned: 'zombie', reachedPoint: true });
    // Fenced by its retry's delivery, the zombie's commit throws: its exit is its own business.
    expect(outcome.attempts[0]!.exitCode).not.toBe(0);
    expect(outcome.attempts[1]).toMatchObject({ attempt: 2, exitCode: 0 });
    expect(outcome.anomalies, outcome.report).toEqual([]);
    expect(outcome.report).toContain('attempt 1 on machine 1: stopped at after-commit (time 2) and left as a zombie, continued once the next attempt has ended');
  });
});
