import type { Command } from 'commander';
import { DeadLetters, type DeadLetter, type Selection } from '../outbox/file/dead-letters.js';
import { DeadLetterError } from '../protocol/errors.js';
import { OutboxFile } from '../outbox/file/outbox-file.js';
import { deadRowsAdvice } from '../outbox/leftovers.js';
import { Exit, exitsWith, UsageError, wholeNumber } from './arguments.js';

/** `oncebox dead list|show|retry|discard FILE`. */
export function deadCommand(program: Command): Command {
  const dead = program
    .command('dead')
    .summary('events the server refused for good, in an outbox file: list, show, retry, discard')
    .description(
      'Dead rows are events the server refused for good (an unknown asset, a token outside its scope, a conflict), ' +
        "parked in the job's outbox file with the server's reason while the rest of the stream went on. " +
        'Fix the cause, then send them again (each exactly once), or discard them on the record.',
    )
    .addHelpText('after', '\nExamples:\n  $ oncebox dead list .oncebox/orders-ingest.db\n  $ oncebox dead retry .oncebox/orders-ingest.db --all --note "asset registered"');
  const ids = (text: string, previous: number[] | undefined) => [...(previous ?? []), wholeNumber(text)];
  const action = (name: string) => (file: string, flags: { id?: number[]; all?: boolean; note?: string; json?: boolean }) =>
    runDeadCommand(name, { path: file, ids: flags.id ?? [], all: flags.all ?? false, note: flags.note ?? '', json: flags.json ?? false });
  dead
    .command('list')
    .description('lists the dead rows, with the code and reason of each')
    .argument('<file>', "the job's outbox file")
    .option('--json', 'one JSON object, for scripts')
    .action(exitsWith(action('list')));
  dead
    .command('show')
    .description('shows dead rows whole: key, payload, run, attempt and reason')
    .argument('<file>', "the job's outbox file")
    .requiredOption('--id <n>', 'a dead row, by the number `dead list` shows; repeatable', ids)
    .option('--json', 'one JSON object per row, for scripts')
    .action(exitsWith(action('show')));
  // retry and discard take the same selection: rows by id, or all of them.
  const selecting = (name: 'retry' | 'discard', description: string, all: string) =>
    dead
      .command(name)
      .description(description)
      .argument('<file>', "the job's outbox file")
      .option('--id <n>', 'a dead row; repeatable', ids)
      .option('--all', all)
      .option('--note <text>', 'why, kept with the record of the action')
      .option('--json', 'one JSON object, for scripts')
      .action(exitsWith(action(name)));
  selecting('retry', 'sends dead rows again, with their keys: each reaches the server once; a row that cannot go again stays dead, saying why (exit 3)', 'every dead row that can go again');
  selecting('discard', "removes dead rows for good, keeping each whole in the file's record of actions", 'every dead row');
  return dead;
}

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
export function runDeadCommand(action: string, options: DeadCommandOptions): number {
  const file = new OutboxFile(options.path, 'full', false);
  try {
    const letters = new DeadLetters(file);
    switch (action) {
      case 'list': {
        const rows = letters.list();
        if (options.json) console.log(JSON.stringify({ dead: rows }));
        else if (rows.length === 0) console.log(`${options.path}: no dead rows`);
        else {
          for (const row of rows) console.log(oneLine(row));
          // What fixes them, from the table every other place reads: one line per code and asset.
          for (const line of deadRowsAdvice(options.path, rows, rows.length).slice(0, -1)) console.log(`fix ${line}`);
        }
        return 0;
      }
      case 'show':
        for (const id of requireIds(options, 'show')) {
          const row = letters.get(id);
          if (!row) throw new DeadLetterError([{ id, why: 'not dead' }], `dead show: row ${id} of ${options.path} is not dead (\`oncebox dead list ${options.path}\` shows the dead rows)`);
          console.log(options.json ? JSON.stringify(row) : wholeRow(row));
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
          if (options.ids.length > 0 && skipped.length > 0) console.log('nothing was sent again: rows asked for by id go all together or not at all');
          if (retried.length > 0) console.log(`the job's relay sends them with its next commit; or now: oncebox relay ${options.path} --server URL --drain, with the job's server as URL and its token in ONCEBOX_TOKEN`);
        }
        return skipped.length > 0 ? Exit.NeedsAttention : Exit.Ok;
      }
      case 'discard': {
        const discarded = letters.discard(selection(options, 'discard'), options.note);
        if (options.json) console.log(JSON.stringify({ discarded }));
        else for (const row of discarded) console.log(`discarded ${oneLine(row)}`);
        return 0;
      }
      default:
        throw new UsageError(`dead: say list, show, retry or discard (got ${action === undefined ? 'nothing' : `"${action}"`})`);
    }
  } finally {
    file.close();
  }
}

/** A dead row whole, one field a line, for a person. */
function wholeRow(row: DeadLetter): string {
  const fields: [string, unknown][] = [
    ['row', `#${row.id}`],
    ['refused', `[${row.code}] ${row.reason}`],
    ['asset', row.asset],
    ['partition', row.partitionKey ?? '-'],
    ['date', row.partitionDate ?? '-'],
    ['extra', row.extra === null ? '-' : JSON.stringify(row.extra)],
    ['run', `${row.workflow}/${row.runId}${row.task === null ? '' : `/${row.task}`} attempt ${row.attempt} seq ${row.seq}`],
    ['key', row.key],
    ['committed', row.committedAt],
    ['dead since', row.deadSince ?? '-'],
  ];
  return fields.map(([name, value]) => `${name.padEnd(10)} ${String(value)}`).join('\n');
}

function oneLine(row: DeadLetter): string {
  const partition = row.partitionKey === null ? '' : ` ${row.partitionKey}`;
  // A checkpoint update has no asset: say what it is rather than leave a blank.
  const what = row.kind === 'event' ? `${row.asset}${partition}` : `(${row.kind} update)`;
  return `#${row.id} ${what} (run ${row.runId} attempt ${row.attempt}, key ${row.key}) [${row.code}] ${row.reason}`;
}

function requireIds(options: DeadCommandOptions, action: string): number[] {
  if (options.ids.length === 0) throw new UsageError(`dead ${action}: give the rows with --id N (repeatable)`);
  return options.ids;
}

function selection(options: DeadCommandOptions, action: string): Selection {
  if (options.all && options.ids.length > 0) throw new UsageError(`dead ${action}: give --id N or --all, not both`);
  if (options.all) return 'all';
  if (options.ids.length === 0) throw new UsageError(`dead ${action}: give the rows with --id N (repeatable), or --all`);
  return options.ids;
}
