import type { Command } from 'commander';
import { OutboxFile } from '../outbox/file/outbox-file.js';
import { readStatus } from '../outbox/status.js';
import { Exit, exitsWith } from './arguments.js';

/** `oncebox status FILE`. */
export function statusCommand(program: Command): Command {
  return program
    .command('status')
    .summary("an outbox file's counts, lease and last error")
    .description(
      "Shows what an outbox file holds: events pending, delivered and dead, checkpoint updates not yet mirrored, " +
        'held emissions, whether its run was fenced, the relay holding it, and the last delivery error. ' +
        'Exits 0 when nothing is dead, 3 when events are dead (see `oncebox dead list FILE`).',
    )
    .argument('<file>', "the job's outbox file")
    .option('--json', 'one JSON object, for scripts')
    .addHelpText('after', '\nExample:\n  $ oncebox status .oncebox/orders-ingest.db')
    .action(exitsWith((file: string, flags: { json?: boolean }) => printStatus(file, flags.json ?? false)));
}

/** `oncebox status FILE`: counts, lease and last error of an outbox file, for people or (--json) for scripts. */
export function printStatus(path: string, json: boolean): number {
  const file = new OutboxFile(path, 'full', false);
  try {
    const status = readStatus(file);
    const exit = status.dead > 0 ? Exit.NeedsAttention : Exit.Ok;
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
    console.log(`last error ${status.lastError ? `${status.lastError.at} [${status.lastError.code}] ${status.lastError.message}` : '-'}`);
    for (const dead of status.deadRows) {
      console.log(`dead       #${dead.id} ${dead.asset}${dead.partitionKey === null ? '' : ` ${dead.partitionKey}`} [${dead.code}] ${dead.reason}`);
    }
    if (status.dead > 0) console.log(`next       fix the cause, then \`oncebox dead retry ${path} --all\` (or discard them: \`oncebox dead discard\`)`);
    return exit;
  } finally {
    file.close();
  }
}
