import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';

const made: string[] = [];

/** A fresh directory for this test, removed after it. Each test gets its own real SQLite files. */
export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncebox-test-'));
  made.push(dir);
  return dir;
}

afterEach(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});
