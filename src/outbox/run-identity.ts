import { NoRunContextError, OptionsError } from '../protocol/errors.js';
import type { RunOptions } from './options.js';

/*
 * Who a run is, taken from what started it. A job that hard-codes its run id "resumes" the next day and
 * publishes nothing: each run of a schedule needs an id of its own, the same on every retry of that run,
 * and an attempt that grows with each retry (docs/runners.md).
 */

/** Where runFromEnvironment looks, in this order: the first whose run id variable is set is used. */
const SOURCES = [
  // oncebox's own: any runner can set them (the testing kit does).
  { name: 'oncebox', workflow: 'ONCEBOX_WORKFLOW', runId: 'ONCEBOX_RUN_ID', task: 'ONCEBOX_TASK', attempt: 'ONCEBOX_ATTEMPT' },
  // Airflow 3 puts its task's context in the environment of the task and of the commands it runs.
  { name: 'Airflow', workflow: 'AIRFLOW_CTX_DAG_ID', runId: 'AIRFLOW_CTX_DAG_RUN_ID', task: 'AIRFLOW_CTX_TASK_ID', attempt: 'AIRFLOW_CTX_TRY_NUMBER' },
  // GitHub Actions: a re-run of a workflow run keeps its id and raises its attempt.
  { name: 'GitHub Actions', workflow: 'GITHUB_WORKFLOW', runId: 'GITHUB_RUN_ID', task: 'GITHUB_JOB', attempt: 'GITHUB_RUN_ATTEMPT' },
] as const;

export interface RunDefaults {
  /** The workflow when the environment names none (oncebox's variables may leave it out). */
  workflow?: string;
  /** The task when the environment names none. */
  task?: string;
}

/**
 * The run this process is, from the environment its scheduler gave it: oncebox's own variables
 * (`ONCEBOX_RUN_ID`, `ONCEBOX_ATTEMPT`, `ONCEBOX_WORKFLOW`, `ONCEBOX_TASK`), Airflow's task context
 * (`AIRFLOW_CTX_DAG_ID`, `_DAG_RUN_ID`, `_TASK_ID`, `_TRY_NUMBER`) or GitHub Actions'
 * (`GITHUB_WORKFLOW`, `GITHUB_RUN_ID`, `GITHUB_JOB`, `GITHUB_RUN_ATTEMPT`), the first whose run id is set.
 * Without an attempt there, the attempt is `'claim'`: the server hands out the next one.
 * @throws NoRunContextError naming every variable it looked for, when none is set.
 */
export function runFromEnvironment(defaults: RunDefaults = {}, env: NodeJS.ProcessEnv = process.env): RunOptions {
  const value = (name: string) => {
    const text = env[name]?.trim();
    return text === undefined || text === '' ? undefined : text;
  };
  for (const source of SOURCES) {
    const runId = value(source.runId);
    if (runId === undefined) continue;
    const workflow = value(source.workflow) ?? defaults.workflow;
    if (workflow === undefined) {
      throw new NoRunContextError(`the run id comes from ${source.runId} (${source.name}), but nothing names its workflow: set ${source.workflow}, or give runFromEnvironment({ workflow })`);
    }
    const task = value(source.task) ?? defaults.task;
    return { workflow, runId, ...(task === undefined ? {} : { task }), attempt: attemptFrom(value(source.attempt), source.attempt) };
  }
  throw new NoRunContextError(
    `no run in the environment: set ONCEBOX_RUN_ID (and ONCEBOX_ATTEMPT), or run under Airflow (AIRFLOW_CTX_DAG_RUN_ID) or GitHub Actions (GITHUB_RUN_ID); ` +
      'a job on a timer takes its run from its schedule: scheduledRun() (docs/runners.md)',
  );
}

function attemptFrom(text: string | undefined, variable: string): number | 'claim' {
  if (text === undefined) return 'claim';
  if (!/^\d+$/.test(text) || Number(text) < 1) throw new OptionsError('run.attempt', `${variable}: must be the try number, a whole number from 1 (got ${JSON.stringify(text)})`);
  return Number(text);
}

export interface ScheduledRunOptions extends RunDefaults {
  workflow: string;
  /** How often the job runs: its run id is the day (`2026-12-05`) or the hour (`2026-12-05T02`) it is for, in UTC. */
  every: 'day' | 'hour';
  /**
   * The time the run is for: the scheduler's planned time when it gives one (a late start after midnight
   * is still yesterday's run). @defaultValue now
   */
  at?: Date;
}

/**
 * The run of a job on a timer (cron, a systemd timer, a Kubernetes CronJob without its own id): the day
 * or hour it is for, so that each scheduled run publishes its own batches and a re-run of the same day
 * resumes it. The attempt is `'claim'`: a re-run of a day fences the one before it, which may still run.
 */
export function scheduledRun(options: ScheduledRunOptions): RunOptions {
  const at = options.at ?? new Date();
  if (Number.isNaN(at.getTime())) throw new OptionsError('at', 'scheduledRun: at: must be a valid date');
  const iso = at.toISOString();
  const runId = options.every === 'day' ? iso.slice(0, 10) : iso.slice(0, 13);
  return { workflow: options.workflow, runId, ...(options.task === undefined ? {} : { task: options.task }), attempt: 'claim' };
}
