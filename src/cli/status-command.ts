import type { Command } from 'commander';
import { OutboxFile } from '../outbox/file/outbox-file.js';
import { deadRowsAdvice } from '../outbox/leftovers.js';
import { readStatus, type OutboxStatus } from '../outbox/status.js';
import { countFrom0, Exit, exitsWith } from './arguments.js';

/**
 * How `oncebox status` ends, for a cron job or a Kubernetes probe: healthy; events dead; the relay
 * stopped for good (nothing more is delivered until a run with the fix); rows pending for longer than
 * --max-pending-age (delivery stalled). When several hold, the first of: stopped, stalled, dead.
 */
export const StatusExit = { Healthy: Exit.Ok, Dead: Exit.NeedsAttention, RelayStopped: 4, Stalled: 5 } as const;

/** The exit status for `status`: see StatusExit. */
export function statusExit(status: OutboxStatus, maxPendingAgeMs: number | undefined): number {
  const pending = status.pending + status.pendingCheckpoints > 0;
  // A lost lease stops one relay, not the file's delivery: the relay that took the lease goes on.
  if (pending && status.lastError?.stopped === true && status.lastError.code !== 'lease_lost') return StatusExit.RelayStopped;
  if (maxPendingAgeMs !== undefined && status.oldestPendingAgeMs !== null && status.oldestPendingAgeMs > maxPendingAgeMs) return StatusExit.Stalled;
  if (status.dead > 0) return StatusExit.Dead;
  return StatusExit.Healthy;
}

/** `oncebox status FILE`. */
export function statusCommand(program: Command): Command {
  return program
    .command('status')
    .summary("an outbox file's counts, lease and last error")
    .description(
      "Shows what an outbox file holds: events pending, delivered and dead, checkpoint updates not yet mirrored, " +
        'held emissions, whether its run was fenced, the relay holding it, and the last delivery error. ' +
        'For monitoring, its exit status: 0 healthy; 3 events dead (see `oncebox dead list FILE`); 4 the relay stopped for good with rows ' +
        'pending (a token the server refuses, a server that lost the stream: its last error names the fix); 5 rows pending for longer ' +
        'than --max-pending-age (delivery stalled). When several hold, the first of 4, 5, 3.',
    )
    .argument('<file>', "the job's outbox file")
    .option('--json', 'one JSON object, for scripts')
    .option('--max-pending-age <seconds>', 'exit 5 when a row has been pending for longer than this', countFrom0)
    .addHelpText('after', '\nExamples:\n  $ oncebox status .oncebox/orders-ingest.db\n  $ oncebox status .oncebox/orders-ingest.db --max-pending-age 600 >/dev/null || alert')
    .action(
      exitsWith((file: string, flags: { json?: boolean; maxPendingAge?: number }) =>
        printStatus(file, flags.json ?? false, flags.maxPendingAge === undefined ? undefined : flags.maxPendingAge * 1000),
      ),
    );
}

/** `oncebox status FILE`: counts, lease and last error of an outbox file, for people or (--json) for scripts. */
export function printStatus(path: string, json: boolean, maxPendingAgeMs?: number): number {
  const file = new OutboxFile(path, 'full', false);
  try {
    const status = readStatus(file);
    const exit = statusExit(status, maxPendingAgeMs);
    if (json) {
      console.log(JSON.stringify(status));
      return exit;
    }
    const age = status.oldestPendingAgeMs === null ? '-' : `${(status.oldestPendingAgeMs / 1000).toFixed(1)} s`;
    const run = status.run ? `${status.run.workflow}/${status.run.runId}${status.run.task ? `/${status.run.task}` : ''} attempt ${status.run.attempt}` : '-';
    console.log(`outbox     ${status.path} (producer ${status.producer ?? '?'})`);
    console.log(`run        ${run}`);
    console.log(`events     ${status.pending} pending, ${status.delivered} delivered, ${status.dead} dead`);
    console.log(`checkpoint ${status.pendingCheckpoints} update${status.pendingCheckpoints === 1 ? '' : 's'} not yet mirrored to the server`);
    console.log(`held       ${status.held} until the run succeeds, ${status.discarded} discarded by a failure`);
    console.log(`fenced     ${status.fenced ? `yes, by attempt ${status.fencedBy}` : 'no'}`);
    console.log(`oldest     pending for ${age}`);
    console.log(`lease      ${status.lease ? `${status.lease.owner} (pid ${status.lease.pid} on ${status.lease.host}) until ${status.lease.expiresAt}` : 'free'}`);
    console.log(`last error ${status.lastError ? `${status.lastError.at} [${status.lastError.code}]${status.lastError.stopped ? ' (the relay stopped on it)' : ''} ${status.lastError.message}` : '-'}`);
    for (const dead of status.deadRows) {
      console.log(`dead       #${dead.id} ${dead.asset}${dead.partitionKey === null ? '' : ` ${dead.partitionKey}`} [${dead.code}] ${dead.reason}`);
    }
    const delivery = deliveryAdvice(path, status, exit);
    if (delivery !== undefined) console.log(`next       ${delivery}`);
    if (status.dead > 0) for (const advice of deadRowsAdvice(path, status.deadRows, status.dead)) console.log(`next       ${advice}`);
    return exit;
  } finally {
    file.close();
  }
}

/** Why rows wait, when the exit status says delivery stopped or stalled, and what starts it again. */
function deliveryAdvice(path: string, status: OutboxStatus, exit: number): string | undefined {
  const relay = `oncebox relay ${path} --server URL --drain (with the job's token in ONCEBOX_TOKEN)`;
  if (exit === StatusExit.RelayStopped) {
    return `the relay stopped for good on ${status.lastError!.code}: fix that (docs/runbook.md), then deliver what waits: ${relay}, or run the job again`;
  }
  if (exit !== StatusExit.Stalled) return undefined;
  const leased = status.lease !== null && Date.parse(status.lease.expiresAt) > Date.now();
  if (!leased) return `no relay is delivering this file (none holds its lease): start one, ${relay}; a job with relay: 'external' needs one beside it`;
  if (status.lastError !== null) return `the relay of ${status.lease!.owner} keeps failing (${status.lastError.code}): fix that; it tries again by itself`;
  return `the relay of ${status.lease!.owner} holds the file but has delivered nothing for that long: is its process alive and its server reachable?`;
}
