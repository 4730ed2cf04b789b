import type Database from 'better-sqlite3';
import { sql } from 'kysely';
import { params, prepare, queryBuilder } from '../../sqlite/statements.js';
import type { OutboxSchema } from './schema.js';
import type { RunKey } from '../run.js';

/**
 * The file's copy of each run's checkpoints, by name: what a job reads on resume and what its commits
 * set. A run's task has checkpoints of its own, since several runs and tasks may share a file (outbox
 * migration 011).
 * @internal
 */
export function checkpointStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const run = params<RunKey>();
  const checkpointOf = params<RunKey & { name: string }>();
  const checkpoint = params<RunKey & { name: string; value: string; now: number }>();
  return {
    getCheckpoint: prepare(
      db,
      checkpointOf,
      q
        .selectFrom('checkpoints')
        .select('value')
        .where((eb) => eb.and({ run_id: checkpointOf.runId, task: checkpointOf.task, name: checkpointOf.name })),
    ),
    setCheckpoint: prepare(
      db,
      checkpoint,
      q
        .insertInto('checkpoints')
        .values({ run_id: checkpoint.runId, task: checkpoint.task, name: checkpoint.name, value: checkpoint.value, updated_at: checkpoint.now })
        .onConflict((oc) => oc.columns(['run_id', 'task', 'name']).doUpdateSet({ value: checkpoint.value, updated_at: checkpoint.now })),
    ),
    forgetRun: prepare(db, run, q.deleteFrom('checkpoints').where((eb) => eb.and({ run_id: run.runId, task: run.task }))),
    runHasCheckpoint: prepare(db, run, q.selectFrom('checkpoints').select('name').where((eb) => eb.and({ run_id: run.runId, task: run.task })).limit(sql.lit(1))),
  };
}

/** @internal */
export type CheckpointStatements = ReturnType<typeof checkpointStatements>;
