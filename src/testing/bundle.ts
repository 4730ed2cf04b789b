import { type ChildProcess, spawn, type SpawnOptions } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Plugin } from 'esbuild';

/**
 * Packages a bundle with its packages leaves out: native addons, packages that load files or start
 * workers by path, optional ones that may be missing, and the tools a test process runs in.
 */
const UNBUNDLED_PACKAGES = ['better-sqlite3', 'pino', 'pino-pretty', 'thread-stream', 'pg-native', 'bullmq', 'ioredis', 'playwright-core', '@opentelemetry/api', 'esbuild', 'vite', 'vitest', 'tsx'];

/**
 * @internal The executable and arguments that run a program file with node. A TypeScript file is
 * bundled once with esbuild, when it is installed, into `node_modules/.cache/oncebox-testing/` of its
 * project, so that each process starts with plain node: here a process that opens an outbox starts on
 * about 0.9 s of CPU against 3 s for `node --import tsx`, and a test that starts hundreds of processes
 * spends its time on what they do. A job's packages stay imports, resolved from there as from the file;
 * with `packages: 'bundled'` (oncebox's own tests and simulation) the pure-JavaScript ones are bundled
 * too, which halves what a process spends loading them again. Without esbuild the file runs with
 * `node --import tsx`. Source maps stay on: a stack points at the program's own files, not at its bundle.
 */
export async function nodeCommandFor(file: string, { packages = 'external' }: { packages?: 'external' | 'bundled' } = {}): Promise<[string, string[]]> {
  if (!/\.(ts|mts|cts)$/.test(file)) return [process.execPath, [file]];
  const bundled = await bundle(resolve(file), packages);
  return bundled === undefined ? [process.execPath, ['--import', 'tsx', file]] : [process.execPath, ['--enable-source-maps', bundled]];
}

/**
 * @internal Starts a TypeScript program of oncebox's own (a test's or the simulation's process) bundled
 * with its packages. `signal` works from the first moment: a signal sent while the program is still
 * being bundled reaches it as soon as it starts.
 */
export function spawnBundled(file: string, args: readonly string[], options: SpawnOptions): { started: Promise<ChildProcess>; signal: (signal: NodeJS.Signals) => void } {
  let child: ChildProcess | undefined;
  let early: NodeJS.Signals | undefined;
  const started = nodeCommandFor(file, { packages: 'bundled' }).then(([executable, prefix]) => {
    child = spawn(executable, [...prefix, ...args], options);
    if (early !== undefined) child.kill(early);
    return child;
  });
  const signal = (name: NodeJS.Signals) => {
    if (child === undefined) early = name;
    else child.kill(name);
  };
  return { started, signal };
}

/** Built at most once per process for each version of an entry file; the bundle is rebuilt in each new process, as its imports may have changed. */
const bundles = new Map<string, Promise<string | undefined>>();

function bundle(file: string, packages: 'external' | 'bundled'): Promise<string | undefined> {
  const version = `${file}:${statSync(file).mtimeMs}:${packages}`;
  let built = bundles.get(version);
  if (built === undefined) {
    built = buildBundle(file, packages);
    bundles.set(version, built);
  }
  return built;
}

async function buildBundle(file: string, packages: 'external' | 'bundled'): Promise<string | undefined> {
  let esbuild: typeof import('esbuild');
  try {
    esbuild = await import('esbuild');
  } catch {
    return undefined;
  }
  const cache = join(nearestNodeModules(dirname(file)) ?? dirname(file), '.cache', 'oncebox-testing');
  mkdirSync(cache, { recursive: true });
  const outfile = join(cache, `${basename(file).replace(/\.[cm]?ts$/, '')}-${createHash('sha256').update(`${file}:${packages}`).digest('hex').slice(0, 12)}.mjs`);
  const { outputFiles } = await esbuild.build({
    entryPoints: [file],
    outfile,
    write: false,
    bundle: true,
    ...(packages === 'external'
      ? { packages: 'external' as const }
      : {
          external: UNBUNDLED_PACKAGES,
          // A bundled CommonJS package may require a built-in or an unbundled package: it finds them from
          // here. (The bundle's own URL, spelt so because ownModuleUrls rewrites the usual spelling in the
          // files it bundles, this one among them.)
          banner: { js: "import { createRequire as createRequireOfBundle } from 'node:module'; const require = createRequireOfBundle(import.meta['url']);" },
        }),
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: 'inline',
    sourcesContent: false,
    logLevel: 'silent',
    plugins: [ownModuleUrls],
  });
  // Written beside and renamed into place: two processes bundling the same file at once (two test
  // workers) never start a half-written one.
  const partial = `${outfile}.${process.pid}.partial`;
  writeFileSync(partial, outputFiles[0]!.contents);
  renameSync(partial, outfile);
  return outfile;
}

/**
 * Each module of the program keeps its own `import.meta.url` in the bundle: a path it builds from it (its
 * package.json two folders up, a data folder beside it) means what it meant unbundled, not a path beside
 * the bundle. Files under node_modules (the packages a bundle takes in) are left to esbuild as they are.
 */
const ownModuleUrls: Plugin = {
  name: 'own-module-urls',
  setup(build) {
    build.onLoad({ filter: /\.[cm]?[jt]sx?$/ }, (args) => {
      if (args.path.split(/[\\/]/).includes('node_modules')) return undefined;
      const url = pathToFileURL(args.path).href;
      const contents = readFileSync(args.path, 'utf8')
        .replaceAll('import.meta.url', JSON.stringify(url))
        .replaceAll('import.meta.filename', JSON.stringify(args.path))
        .replaceAll('import.meta.dirname', JSON.stringify(dirname(args.path)));
      const extension = extname(args.path).replace(/^\.[cm]?/, '');
      return { contents, loader: extension as 'ts' | 'tsx' | 'js' | 'jsx' };
    });
  },
};

function nearestNodeModules(from: string): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'node_modules'))) return join(dir, 'node_modules');
    if (dirname(dir) === dir) return undefined;
  }
}
