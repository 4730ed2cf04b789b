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
