import { describe, expect, it } from 'vitest';
import { NoRunContextError, runFromEnvironment, scheduledRun } from '../../src/outbox/index.js';

describe("a run's identity from what started it", () => {
  it("is read from oncebox's own variables first, then Airflow's task context, then GitHub Actions'", () => {
    const airflow = { AIRFLOW_CTX_DAG_ID: 'orders', AIRFLOW_CTX_DAG_RUN_ID: 'scheduled__2026-12-05T02:00:00+00:00', AIRFLOW_CTX_TASK_ID: 'ingest', AIRFLOW_CTX_TRY_NUMBER: '2' };
    const github = { GITHUB_WORKFLOW: 'nightly', GITHUB_RUN_ID: '8812', GITHUB_JOB: 'load', GITHUB_RUN_ATTEMPT: '3' };
    expect(runFromEnvironment({}, airflow)).toEqual({ workflow: 'orders', runId: 'scheduled__2026-12-05T02:00:00+00:00', task: 'ingest', attempt: 2 });
    expect(runFromEnvironment({}, github)).toEqual({ workflow: 'nightly', runId: '8812', task: 'load', attempt: 3 });
    expect(runFromEnvironment({}, { ...github, ...airflow })).toMatchObject({ workflow: 'orders', attempt: 2 });
    // oncebox's own win over a scheduler's, and the defaults fill what they leave out.
    expect(runFromEnvironment({ workflow: 'orders', task: 'ingest' }, { ...airflow, ONCEBOX_RUN_ID: 'backfill-7', ONCEBOX_ATTEMPT: '1' })).toEqual({ workflow: 'orders', runId: 'backfill-7', task: 'ingest', attempt: 1 });
  });

  it("claims the attempt from the server when the environment names none", () => {
    expect(runFromEnvironment({ workflow: 'orders' }, { ONCEBOX_RUN_ID: '2026-12-05' })).toEqual({ workflow: 'orders', runId: '2026-12-05', attempt: 'claim' });
  });

  it('refuses with every variable it looked for, a run id without a workflow, and an attempt that is not a try number', () => {
    expect(() => runFromEnvironment({}, {})).toThrow(NoRunContextError);
    expect(() => runFromEnvironment({}, {})).toThrow(/ONCEBOX_RUN_ID .*AIRFLOW_CTX_DAG_RUN_ID.*GITHUB_RUN_ID.*scheduledRun\(\)/);
    expect(() => runFromEnvironment({}, { ONCEBOX_RUN_ID: 'r' })).toThrow('the run id comes from ONCEBOX_RUN_ID (oncebox), but nothing names its workflow: set ONCEBOX_WORKFLOW, or give runFromEnvironment({ workflow })');
    expect(() => runFromEnvironment({ workflow: 'w' }, { ONCEBOX_RUN_ID: 'r', ONCEBOX_ATTEMPT: 'two' })).toThrow(expect.objectContaining({ code: 'invalid_option', message: 'ONCEBOX_ATTEMPT: must be the try number, a whole number from 1 (got "two")' }));
    expect(() => runFromEnvironment({ workflow: 'w' }, { ONCEBOX_RUN_ID: 'r', ONCEBOX_ATTEMPT: '0' })).toThrow(/got "0"/);
  });

  it('of a job on a timer is the day or hour it is for, in UTC, so that the next day is another run; retries claim their attempt', () => {
    const today = scheduledRun({ workflow: 'orders', task: 'ingest', every: 'day', at: new Date('2026-12-05T23:59:59.999Z') });
    const tomorrow = scheduledRun({ workflow: 'orders', task: 'ingest', every: 'day', at: new Date('2026-12-06T00:00:00Z') });
    expect(today).toEqual({ workflow: 'orders', runId: '2026-12-05', task: 'ingest', attempt: 'claim' });
    expect(tomorrow.runId).toBe('2026-12-06');
    expect(scheduledRun({ workflow: 'orders', every: 'hour', at: new Date('2026-12-05T02:30:00Z') })).toEqual({ workflow: 'orders', runId: '2026-12-05T02', attempt: 'claim' });
    expect(scheduledRun({ workflow: 'orders', every: 'day' }).runId).toBe(new Date().toISOString().slice(0, 10));
    expect(() => scheduledRun({ workflow: 'orders', every: 'day', at: new Date('nope') })).toThrow('scheduledRun: at: must be a valid date');
  });
});
