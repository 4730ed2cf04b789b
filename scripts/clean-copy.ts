import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/**
 * A copy of a checkout as a clean clone of it would be, but with its uncommitted work: the files git
 * tracks and the new ones it does not ignore, and none of what it ignores (outbox files, tokens, .oncebox/).
 * It shares the checkout's node_modules, so that nothing is installed again. For `npm run breaks`, which
 * puts bugs into the copy, and for the tests that run the README's commands as a new user would.
 */
export function cleanCopy(repo: string, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: repo, encoding: 'utf8' }).split('\0').filter(Boolean);
  for (const file of files) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    try {
      cpSync(join(repo, file), join(dir, file));
    } catch {
      // Deleted in the working tree but still in the index.
    }
  }
  symlinkSync(join(repo, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}
