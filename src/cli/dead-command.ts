import { DeadLetters, type DeadLetter, type Selection } from '../outbox/file/dead-letters.js';
import { OutboxFile } from '../outbox/file/outbox-file.js';

export interface DeadCommandOptions {
  path: string;
  ids: number[];
  all: boolean;
  note: string;
  json: boolean;
}

/**
 * `oncebox dead list|show|retry|discard FILE`: the rows the server refused for good, and what to do with
 * them once the cause is fixed (send again, exactly once) or accepted (discard, on the record).
 */
export function runDeadCommand(action: string | undefined, options: DeadCommandOptions): number {
  const file = new OutboxFile(options.path, 'full', false);
  try {
    const letters = new DeadLetters(file);
    switch (action) {
      case 'list': {
        const rows = letters.list();
        if (options.json) console.log(JSON.stringify({ dead: rows }));
        else if (rows.length === 0) console.log(`${options.path}: no dead rows`);
        else for (const row of rows) console.log(oneLine(row));
        return 0;
      }
      case 'show':
        for (const id of requireIds(options, 'show')) {
          const row = letters.get(id);
          if (!row) throw new DeadUsageError(`dead show: row ${id} of ${options.path} is not dead (\`oncebox dead list\` shows the dead rows)`);
          console.log(options.json ? JSON.stringify(row) : JSON.stringify(row, null, 2));
        }
        return 0;
      case 'retry': {
        const { retried, skipped } = letters.retry(selection(options, 'retry'), options.note);
        if (options.json) {
          console.log(JSON.stringify({ retried, skipped }));
        } else {
          if (retried.length === 0 && skipped.length === 0) console.log(`${options.path}: no dead rows to send again`);
          for (const row of retried) console.log(`row ${row.id} goes out again as row ${row.newId} (attempt ${row.attempt}, seq ${row.seq}, key ${row.key})`);
          for (const row of skipped) console.log(`row ${row.id} stays dead: ${row.why}`);
          if (retried.length > 0) console.log(`the job's relay sends them with its next commit; or now: oncebox relay --db ${options.path} --server URL --drain`);
        }
        return skipped.length > 0 ? 3 : 0;
      }
      case 'discard': {
        const discarded = letters.discard(selection(options, 'discard'), options.note);
        if (options.json) console.log(JSON.stringify({ discarded }));
        else for (const row of discarded) console.log(`discarded ${oneLine(row)}`);
        return 0;
      }
      default:
        throw new DeadUsageError(`dead: say list, show, retry or discard (got ${action === undefined ? 'nothing' : `"${action}"`})`);
    }
  } finally {
    file.close();
  }
}

export class DeadUsageError extends Error {}

function oneLine(row: DeadLetter): string {
  const partition = row.partitionKey === null ? '' : ` ${row.partitionKey}`;
  return `#${row.id} ${row.asset}${partition} (run ${row.runId} attempt ${row.attempt}, key ${row.key}) [${row.code}] ${row.reason}`;
}

function requireIds(options: DeadCommandOptions, action: string): number[] {
  if (options.ids.length === 0) throw new DeadUsageError(`dead ${action}: give the rows with --id N (repeatable)`);
  return options.ids;
}

function selection(options: DeadCommandOptions, action: string): Selection {
  if (options.all && options.ids.length > 0) throw new DeadUsageError(`dead ${action}: give --id N or --all, not both`);
  if (options.all) return 'all';
  if (options.ids.length === 0) throw new DeadUsageError(`dead ${action}: give the rows with --id N (repeatable), or --all`);
  return options.ids;
}
