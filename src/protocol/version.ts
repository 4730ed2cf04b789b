import { readFileSync } from 'node:fs';

/** The installed package's version: package.json sits two levels above this file, in src/ and in dist/. */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}
