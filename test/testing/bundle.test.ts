import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { nodeCommandFor } from '../../src/testing/bundle.js';
import { REPO } from '../support/child.js';

/**
 * A TypeScript job runs bundled (checkJob's command, and oncebox's own test processes): each of its
 * modules must see its own `import.meta.url`, so that a path built from it (a file beside the job, the
 * package's version) means what it means unbundled.
 */
describe('a bundled TypeScript program', () => {
  it.each(['external', 'bundled'] as const)('keeps each module’s own import.meta.url (packages %s)', async (packages) => {
    const dir = mkdtempSync(join(tmpdir(), 'oncebox-bundle-'));
    writeFileSync(join(dir, 'beside.txt'), 'read from beside the job');
    writeFileSync(join(dir, 'helper.ts'), "import { readFileSync } from 'node:fs';\nexport const beside = (): string => readFileSync(new URL('./beside.txt', import.meta.url), 'utf8');\n");
    writeFileSync(join(dir, 'job.ts'), "import { beside } from './helper.js';\nimport { packageVersion } from '" + join(REPO, 'src/protocol/version.js') + "';\nconsole.log(JSON.stringify({ url: import.meta.url, beside: beside(), version: packageVersion() }));\n");
    const [executable, args] = await nodeCommandFor(join(dir, 'job.ts'), { packages });
    expect(args.at(-1)).not.toBe(join(dir, 'job.ts'));
    const printed = JSON.parse(execFileSync(executable, args, { encoding: 'utf8' })) as Record<string, string>;
    expect(printed).toEqual({ url: pathToFileURL(join(dir, 'job.ts')).href, beside: 'read from beside the job', version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
  });
});
