/**
 * npm run openapi [-- --write]: prints the OpenAPI document of the wire protocol, generated from the
 * server's zod schemas, or (--write) writes it to docs/openapi.json, which `npm test` checks is current.
 */
import { writeFileSync } from 'node:fs';
import { openApiDocument } from '../src/dedupe/openapi.js';
import { packageVersion } from '../src/protocol/version.js';

export const OPENAPI_FILE = 'docs/openapi.json';

export function openApiText(): string {
  return `${JSON.stringify(openApiDocument(packageVersion()), null, 2)}\n`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  if (process.argv.includes('--write')) {
    writeFileSync(OPENAPI_FILE, openApiText());
    console.log(`${OPENAPI_FILE}: written`);
  } else {
    process.stdout.write(openApiText());
  }
}
