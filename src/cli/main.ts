#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { OnceboxError, OptionsError } from '../protocol/errors.js';
import { packageVersion } from '../protocol/version.js';
import { actionStatus, activeCommand, Exit, setActiveCommand, UsageError } from './arguments.js';
import { deadCommand } from './dead-command.js';
import { eventsCommand } from './events-command.js';
import { lsCommand } from './ls-command.js';
import { forwardCommand } from './forward-command.js';
import { relayCommand } from './relay-command.js';
import { serverCommand } from './server-command.js';
import { statusCommand } from './status-command.js';
import { tokenCommand } from './token-command.js';

/*
 * The `oncebox` command: commander parses, checks and documents every command and option (`oncebox
 * --help`, `oncebox COMMAND --help`). A wrong command line prints one line saying what is wrong and
 * where the help is, and exits 2; a failure prints its message and code, and exits 1.
 */

function buildProgram(): Command {
  const program = new Command('oncebox')
    .description('Effectively-once event publication from batch jobs: the server, the relay, and tools for outbox files.')
    .version(packageVersion(), '-v, --version', 'print the version')
    .helpOption('-h, --help', 'show help for a command')
    .helpCommand('help [command]', 'show help for a command')
    .showSuggestionAfterError()
    .exitOverride();
  for (const add of [serverCommand, relayCommand, statusCommand, eventsCommand, lsCommand, deadCommand, tokenCommand, forwardCommand]) {
    const command = add(program);
    oneLineErrors(command);
  }
  program.command('version', { hidden: true }).action(() => console.log(packageVersion()));
  // An error an action throws points to that command's own --help.
  program.hook('preAction', (_program, action) => setActiveCommand(commandPath(action)));
  program.addHelpText(
    'after',
    `
Tokens: jobs, consumers and commands take theirs from ONCEBOX_TOKEN (commands also from --token-file);
the server its admin token from --token-file or ONCEBOX_ADMIN_TOKEN. See docs/security.md.
Exit status: 0 done, 1 failed (the message says why), 2 wrong command line, 3 done but needs you
(events dead, or a fenced forwarder); \`oncebox status\` also 4 (relay stopped) and 5 (delivery stalled).`,
  );
  oneLineErrors(program);
  return program;
}

/** Errors of a command and its subcommands as one line, pointing to that command's --help. */
function oneLineErrors(command: Command): void {
  command.configureOutput({
    outputError: (text, write) => write(`oncebox: ${text.replace(/^error: /, '').trim().replace(/\s*\n\s*/g, ' ')} (see '${commandPath(command)} --help')\n`),
  });
  for (const sub of command.commands) oneLineErrors(sub);
}

function commandPath(command: Command): string {
  const names: string[] = [];
  for (let at: Command | null = command; at; at = at.parent) names.unshift(at.name());
  return names.join(' ');
}

async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return actionStatus();
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and the version asked for end well; help shown for want of a subcommand, and anything else
      // commander stopped on, is a wrong command line.
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version') return Exit.Ok;
      if (error.code === 'commander.help' && error.exitCode === 0) return Exit.Ok;
      return Exit.Usage;
    }
    throw error;
  }
}

// Every command ends through main's promise, by process.exit. An event loop left empty before that means a
// command's work is waiting on something that will never come (a request nothing holds open): node would
// end with status 0 and no word, the work undone. Said instead, and a failure.
process.once('beforeExit', () => {
  console.error(`oncebox: ${activeCommand()} stopped before it finished: nothing was left to wait on (a defect in oncebox; please report it)`);
  process.exit(Exit.Failed);
});

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    // What the command line asked for cannot be: one line, where to look, and status 2.
    if (error instanceof UsageError || error instanceof OptionsError) {
      console.error(`oncebox ${error.message} (see '${activeCommand()} --help')`);
      process.exit(Exit.Usage);
    }
    const code = error instanceof OnceboxError ? ` [${error.code}]` : '';
    console.error(`oncebox: ${(error as Error).message}${code}`);
    process.exit(Exit.Failed);
  },
);
