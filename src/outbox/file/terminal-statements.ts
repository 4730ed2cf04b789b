import type Database from 'better-sqlite3';
import { sql, type Selectable } from 'kysely';
import { params, prepare, queryBuilder } from '../../sqlite/statements.js';
import type { OutboxSchema } from './schema.js';
import type { RunKey } from '../run.js';

/** @internal An emission held for its run's success. */
export type HeldRow = Selectable<OutboxSchema['held_emissions']>;

/** A literal in the SQL: a prepared statement binds only named parameters. */
const HELD = sql.lit('held' as const);

/**
 * @internal The statements of terminal commits: held emissions and attempt outcomes.
 * It is long because it is a list, one entry per prepared statement, each read on its own; split, the statements of one table would scatter.
 */
export function terminalStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const p = {
    hold: params<Omit<HeldRow, 'id' | 'state' | 'settled_at' | 'reason'>>(),
    run: params<RunKey>(),
    settle: params<RunKey & { state: 'released' | 'discarded'; now: number; reason: string | null }>(),
    attempt: params<RunKey & { attempt: number }>(),
    outcome: params<RunKey & { attempt: number; outcome: 'succeeded' | 'failed'; reason: string | null; now: number }>(),
  };
  return {
    hold: prepare(
      db,
      p.hold,
      q.insertInto('held_emissions').values({
        run_id: p.hold.run_id,
        task: p.hold.task,
        attempt: p.hold.attempt,
        key: p.hold.key,
        key_scope: p.hold.key_scope,
        fingerprint: p.hold.fingerprint,
        asset: p.hold.asset,
        partition_key: p.hold.partition_key,
        partition_date: p.hold.partition_date,
        extra: p.hold.extra,
        trace_context: p.hold.trace_context,
        committed_at: p.hold.committed_at,
        state: HELD,
      }),
    ),
    // Held, released or discarded: what the run's emissions on success are is then the server's mirror.
    forgetHeldOfRun: prepare(db, p.run, q.deleteFrom('held_emissions').where('run_id', '=', p.run.runId).where('task', '=', p.run.task)),
    heldOfRun: prepare(
      db,
      p.run,
      q.selectFrom('held_emissions').selectAll().where('run_id', '=', p.run.runId).where('task', '=', p.run.task).where('state', '=', HELD).orderBy('id'),
    ),
    settleHeld: prepare(
      db,
      p.settle,
      q
        .updateTable('held_emissions')
        .set({ state: p.settle.state, settled_at: p.settle.now, reason: p.settle.reason })
        .where('run_id', '=', p.settle.runId)
        .where('task', '=', p.settle.task)
        .where('state', '=', HELD),
    ),
    // A run that failed for good and is tried again after all: what its failure discarded is held again,
    // for the success that may come yet.
    holdDiscardedAgain: prepare(
      db,
      p.run,
      q
        .updateTable('held_emissions')
        .set({ state: HELD, settled_at: sql.lit(null), reason: sql.lit(null) })
        .where('run_id', '=', p.run.runId)
        .where('task', '=', p.run.task)
        .where('state', '=', sql.lit('discarded')),
    ),
    outcomeOf: prepare(
      db,
      p.attempt,
      q
        .selectFrom('run_outcomes')
        .select(['outcome', 'reason'])
        .where('run_id', '=', p.attempt.runId)
        .where('task', '=', p.attempt.task)
        .where('attempt', '=', p.attempt.attempt),
    ),
    recordOutcome: prepare(
      db,
      p.outcome,
      q.insertInto('run_outcomes').values({
        run_id: p.outcome.runId,
        task: p.outcome.task,
        attempt: p.outcome.attempt,
        outcome: p.outcome.outcome,
        reason: p.outcome.reason,
        at: p.outcome.now,
      }),
    ),
    countByState: prepare(
      db,
      params<Record<string, never>>(),
      q.selectFrom('held_emissions').select(['state', (eb) => eb.fn.countAll<number>().as('count')]).groupBy('state'),
    ),
  };
}

/** @internal */
export type TerminalStatements = ReturnType<typeof terminalStatements>;
