import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * The job's data store (ONCEBOX_DATA, a folder) as the checker compares it: every file under it, by path,
 * with a digest of its content. A job's data writes must leave the same files as a clean run's, however
 * often a batch was written again. `comparable` maps a file's content before it is compared (a timestamp
 * cut out), or leaves the file out (undefined).
 */
export function snapshotDataStore(dir: string, comparable?: (path: string, content: Buffer) => string | Buffer | undefined): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (at: string) => {
    let entries;
    try {
      entries = readdirSync(at, { withFileTypes: true });
    } catch {
      return; // a job that writes no data leaves no folder
    }
    for (const entry of entries) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) {
        const name = relative(dir, path);
        const content = comparable ? comparable(name, readFileSync(path)) : readFileSync(path);
        // A file the job's mapping leaves out (undefined) is not compared.
        if (content !== undefined) files.set(name, createHash('sha256').update(content).digest('hex'));
      }
    }
  };
  walk(dir);
  return new Map([...files].sort(([a], [b]) => (a < b ? -1 : 1)));
}
