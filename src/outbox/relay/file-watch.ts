import { setTimeout as sleep } from 'node:timers/promises';
import type { OutboxFile } from '../file/outbox-file.js';

/**
 * How often a relay looks whether another connection committed to its file (another process on the same
 * machine, `oncebox relay`, or a second outbox on the file in this process): those commits do not call
 * its `notify()`, and a relay that holds the lease must deliver them too.
 */
const FOREIGN_COMMIT_CHECK_MS = 25;

/**
 * Calls `onCommit` after each commit of another connection to the file: `PRAGMA data_version` changes
 * with each. Returns the timer, unreferenced, for clearInterval.
 * @internal
 */
export function watchForeignCommits(file: OutboxFile, onCommit: () => void): NodeJS.Timeout {
  let seen = file.db.pragma('data_version', { simple: true });
  const timer = setInterval(() => {
    if (!file.db.open) return;
    const version = file.db.pragma('data_version', { simple: true });
    if (version === seen) return;
    seen = version;
    onCommit();
  }, FOREIGN_COMMIT_CHECK_MS);
  timer.unref();
  return timer;
}

/**
 * Waits until no row of the file is pending, whoever delivers them (this process's relay or another's),
 * for at most `timeoutMs`, or until `giveUp` says so.
 * @returns true when drained.
 * @internal
 */
export async function waitUntilDrained(file: OutboxFile, timeoutMs: number, giveUp: () => boolean = () => false): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (file.rows.hasPending.get() !== undefined) {
    if (Date.now() >= deadline || giveUp()) return false;
    await sleep(Math.min(20, Math.max(1, deadline - Date.now())));
  }
  return true;
}
