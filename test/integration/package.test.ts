import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { REPO, runScript } from '../support/child.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const npm = (args: string[], cwd: string) => execFileSync('npm', [...args, '--no-audit', '--no-fund', '--prefer-offline'], { cwd, encoding: 'utf8', stdio: 'pipe' });

/**
 * The package as a user gets it: `npm pack`, installed from the tarball into an empty project, its types
 * checked there, and the README's quickstart run there against a server, with `import … from 'oncebox'`.
 */
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

describe('the packed package', () => {
  it('installs from its tarball, type-checks and runs the quickstart in an empty project', async () => {
    const dir = tempDir();
    // Packed from a copy, so that its build (prepare: a clean dist/) never races another test using the
    // repository's dist/.
    const source = join(dir, 'source');
    mkdirSync(source);
    for (const entry of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'src', 'docs', 'console']) {
      cpSync(join(REPO, entry), join(source, entry), { recursive: true });
    }
    symlinkSync(join(REPO, 'node_modules'), join(source, 'node_modules'));
    npm(['pack', '--pack-destination', dir], source);
    const tarball = readdirSync(dir).find((file) => file.endsWith('.tgz'))!;
    const listing = execFileSync('tar', ['-tzf', join(dir, tarball)], { encoding: 'utf8' }).split('\n');
    expect(listing).toEqual(expect.arrayContaining(['package/dist/outbox/index.js', 'package/dist/cli/main.js', 'package/dist/console/index.html', 'package/README.md', 'package/CHANGELOG.md', 'package/LICENSE']));
    expect(listing.filter((file) => /^package\/(src|test|bench|scripts|console)\//.test(file))).toEqual([]);
    // No source maps: they would name src/*.ts files the package does not ship.
    expect(listing.filter((file) => file.endsWith('.map'))).toEqual([]);
    expect(listing.filter((file) => file.startsWith('package/dist/console/assets/')).length).toBeGreaterThan(0);

    const app = join(dir, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    // better-sqlite3 compiles its native addon on install (a minute or two here, where its prebuilt
    // binaries cannot be downloaded); that build is better-sqlite3's own, and `npm ci` does it for the
    // repository. So scripts are skipped, and the addon the repository built, for the same version and
    // Node, is put in place.
    const pinned = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies;
    // As the README's install line says: oncebox and zod, its peer. No engine warning on Node 20: the
    // package pins what fastify would otherwise resolve to a release that wants Node 22.
    // fast-check too: the testing kit's peer, as docs/testing.md says to install it.
    const install = spawnSync('npm', ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--prefer-offline', join(dir, tarball), `zod@${pinned.zod}`, `fast-check@${pinned['fast-check']}`, '@types/node@20.19.43'], { cwd: app, encoding: 'utf8' });
    expect(install.status, install.stderr).toBe(0);
    expect(install.stdout + install.stderr).not.toMatch(/EBADENGINE|Unsupported engine/);
    const installed = (name: string) => (JSON.parse(readFileSync(join(app, 'node_modules', name, 'package.json'), 'utf8')) as { version: string; engines?: { node?: string } });
    expect(installed('light-my-request').version).toBe('6.6.0');
    expect(installed('cookie').engines?.node).not.toBe('>=22');
    const addon = 'node_modules/better-sqlite3/build/Release/better_sqlite3.node';
    const version = (root: string) => (JSON.parse(readFileSync(join(root, 'node_modules/better-sqlite3/package.json'), 'utf8')) as { version: string }).version;
    expect(version(app)).toBe(version(REPO));
    mkdirSync(join(app, 'node_modules/better-sqlite3/build/Release'), { recursive: true });
    copyFileSync(join(REPO, addon), join(app, addon));

    // The README's quickstart, as a user copies it.
    const quickstart = readFileSync(join(REPO, 'examples/quickstart.ts'), 'utf8').replace(/^\/\/ The README's quickstart.*\n/, '').replace("from '../src/outbox/index.js'", "from 'oncebox'");
    writeFileSync(join(app, 'quickstart.ts'), quickstart);
    writeFileSync(
      join(app, 'entry-points.ts'),
      "import { createServer, TokenRegistry } from 'oncebox/server';\nimport { canonicalJson } from 'oncebox/protocol';\nimport { openOutbox, FencedError } from 'oncebox';\n" +
        'export const used = [createServer, TokenRegistry, canonicalJson, openOutbox, FencedError];\n',
    );
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, skipLibCheck: false, types: ['node'] },
        files: ['quickstart.ts', 'entry-points.ts'],
      }),
    );
    const typecheck = spawnSync(join(REPO, 'node_modules/.bin/tsc'), ['-p', '.'], { cwd: app, encoding: 'utf8' });
    expect(typecheck.stdout + typecheck.stderr).toBe('');

    const bin = join(app, 'node_modules/.bin/oncebox');
    expect(statSync(bin).mode & 0o111).not.toBe(0);
    expect(execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim()).toBe((JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version);

    // `npx oncebox server` stops cleanly when npx is stopped: npx ends on SIGTERM without passing it on.
    // In a process group of its own, so that whatever happens the group is killed after (an orphaned server of a failed run would live on).
    const npx = spawn('npx', ['oncebox', 'server', '--db', join(app, 'npx.db'), '--port', '0'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    cleanups.push(() => {
      try {
        process.kill(-npx.pid!, 'SIGKILL');
      } catch {
        // gone already
      }
    });
    let npxOut = '';
    let npxErr = '';
    npx.stdout.setEncoding('utf8').on('data', (chunk: string) => (npxOut += chunk));
    npx.stderr.setEncoding('utf8').on('data', (chunk: string) => (npxErr += chunk));
    await expect.poll(() => npxOut, { timeout: 60_000 }).toContain('"event":"listening"');
    const npxUrl = (JSON.parse(npxOut.split('\n')[0]!) as { url: string }).url;
    npx.kill('SIGTERM');
    await expect.poll(() => npxOut, { timeout: 60_000 }).toContain('"event":"stopped"');
    expect(npxErr).toContain('oncebox: the npm process that started this one');
    await expect(fetch(`${npxUrl}/healthz`)).rejects.toThrow();

    const { url, server } = await startServer();
    const run = await runScript(join(app, 'quickstart.ts'), [], { env: { ONCEBOX_SERVER: url, ONCEBOX_OUTBOX: join(app, '.oncebox', 'orders-ingest.db') } });
    expect(run.code, run.stderr).toBe(0);
    expect((await server.store.listEvents({ after: 0, limit: 10 })).events.map((event) => event.partitionKey)).toEqual(['batch-1', 'batch-2', 'batch-3', 'done']);

    // The testing kit, as a user runs it on a job of their own (plain JavaScript, importing 'oncebox').
    const job = readFileSync(join(REPO, 'examples/testing/ingest-job.ts'), 'utf8')
      .replace("from '../../src/outbox/index.js'", "from 'oncebox'")
      .replace(/: number/g, '')
      .replace(/!(?!=)/g, ''); // TypeScript's non-null assertions
    writeFileSync(join(app, 'job.mjs'), job);
    writeFileSync(
      join(app, 'check.mjs'),
      "import { checkJob } from 'oncebox/testing';\n" +
        "const result = await checkJob({ command: 'job.mjs', producer: 'orders-ingest', assets: ['batch_ready', 'ingest_done'] }, { runs: 3, seed: 7, log: () => {} });\n" +
        'console.log(JSON.stringify(result));\n',
    );
    // The web console comes built in the package: the installed server serves it, no build on the user's side.
    writeFileSync(
      join(app, 'console.mjs'),
      "import { createServer } from 'oncebox/server';\n" +
        "const server = await createServer({ db: 'console-check.db', logger: false });\n" +
        'const url = await server.listen({ port: 0 });\n' +
        "const page = await fetch(`${url}/console/`);\n" +
        "const script = (await page.clone().text()).match(/src=\"\\.\\/(assets\\/[^\"]+\\.js)\"/)?.[1];\n" +
        "const asset = await fetch(`${url}/console/${script}`);\n" +
        'console.log(JSON.stringify({ page: page.status, type: page.headers.get("content-type"), script: asset.status }));\n' +
        'await server.close();\n',
    );
    const served = spawnSync(process.execPath, ['console.mjs'], { cwd: app, encoding: 'utf8', timeout: 60_000 });
    expect(served.status, served.stderr).toBe(0);
    expect(JSON.parse(served.stdout.trim())).toEqual({ page: 200, type: 'text/html; charset=utf-8', script: 200 });

    const campaign = spawnSync(process.execPath, ['check.mjs'], { cwd: app, encoding: 'utf8', timeout: 120_000 });
    expect(campaign.status, campaign.stderr).toBe(0);
    expect(JSON.parse(campaign.stdout.trim().split('\n').at(-1)!)).toMatchObject({ runs: 3, seed: 7 });
  }, 300_000);
});
