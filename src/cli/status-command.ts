import { OutboxFile } from '../outbox/file/outbox-file.js';
import { readStatus } from '../outbox/status.js';

/** `oncebox status FILE`: counts, lease and last error of an outbox file, for people or (--json) for scripts. */
export function printStatus(path: string, json: boolean): number {
  const file = new OutboxFile(path, 'full', false);
  try {
    const status = readStatus(file);
    if (json) {
      console.log(JSON.stringify(status));
      return 0;
    }
    const age = status.oldestPendingAgeMs === null ? '-' : `${(status.oldestPendingAgeMs / 1000).toFixed(1)} s`;
    const run = status.run ? `${status.run.workflow}/${status.run.runId}${status.run.task ? `/${status.run.task}` : ''} attempt ${status.run.attempt}` : '-';
    console.log(`outbox     ${status.path} (producer ${status.producer ?? '?'})`);
    console.log(`run        ${run}`);
    console.log(`rows       ${status.pending} pending, ${status.delivered} delivered, ${status.dead} dead; ${status.pendingCheckpoints} checkpoint updates pending`);
    console.log(`held       ${status.held} until the run succeeds, ${status.discarded} discarded by a failure`);
    console.log(`fenced     ${status.fenced ? `yes, by attempt ${status.fencedBy}` : 'no'}`);
    console.log(`oldest     pending for ${age}`);
    console.log(`lease      ${status.lease ? `${status.lease.owner} (pid ${status.lease.pid} on ${status.lease.host}) until ${status.lease.expiresAt}` : 'free'}`);
    console.log(`last error ${status.lastError ? `${status.lastError.at} [${status.lastError.code}] ${status.lastError.message}` : '-'}`);
    for (const dead of status.deadRows) {
      console.log(`dead       #${dead.id} ${dead.asset}${dead.partitionKey === null ? '' : ` ${dead.partitionKey}`} [${dead.code}] ${dead.reason}`);
    }
    return 0;
  } finally {
    file.close();
  }
}
