/** Who is emitting: one attempt of one task of one workflow run. */
export interface RunContext {
  /** The workflow (DAG, flow) this run belongs to. */
  workflow: string;
  /** One execution of the workflow; a retry keeps the same runId. */
  runId: string;
  /** The step within the run; leave it out for a workflow-level emission (a run callback). */
  task?: string | undefined;
  /** The try number, from 1; a retry of the same run has a higher attempt. */
  attempt: number;
}

/** One run's stream, as the outbox file keys it: task is '' for a workflow-level run. */
export interface RunKey {
  runId: string;
  task: string;
}

/** Which attempt of which run was fenced, and by which later attempt. */
export interface Fence {
  runId: string;
  task: string | null;
  attempt: number;
  by: number;
}

/*
 * A run's task has one meaning and three forms: undefined in a RunContext (a workflow-level run), ''
 * in the outbox file (a key column, since NULL never equals NULL in a key) and null on the wire and in
 * events. These are the only places that turn one form into another.
 */

/** The file's key of a run's stream, from a RunContext or a Fence. */
export function runKeyOf(run: { runId: string; task?: string | null | undefined }): RunKey {
  return { runId: run.runId, task: run.task ?? '' };
}

/** A task as the wire and the events carry it, from a RunContext or a file row: null for none. */
export function wireTask(task: string | undefined): string | null {
  return task === undefined || task === '' ? null : task;
}
