/**
 * npm run console:screenshots: photographs each page of the web console for docs/console.md, against a
 * real server holding the scene the browser tests use (test/support/console-scene.ts), in Debian's
 * Chromium. The console is built from its sources first, into dist/console where the server serves it.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from '../src/dedupe/index.js';
import { buildConsole, launchChromium, signIn } from '../test/support/chromium.js';
import { buildConsoleScene, publishPartitions } from '../test/support/console-scene.js';

const OUT = 'docs/console';

async function main(): Promise<void> {
  await buildConsole();
  const dir = mkdtempSync(join(tmpdir(), 'oncebox-console-'));
  const server = await createServer({ db: join(dir, 'server.db'), assets: ['batch_ready'], logger: false });
  const url = await server.listen({ port: 0 });
  const browser = await launchChromium();
  try {
    const scene = await buildConsoleScene(server, url, dir);
    await server.store.registerAsset('daily_partitions');
    await publishPartitions(url, scene.adminToken, 'daily_partitions', 10_000);
    mkdirSync(OUT, { recursive: true });
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 }, colorScheme: 'light' });
    await signIn(page, url, scene.consoleToken);
    const shoot = async (hash: string, file: string, ready: string) => {
      await page.goto(`${url}/console/#${hash}`);
      await page.getByRole('heading', { name: ready }).first().waitFor();
      // The live long-poll keeps a request open, so the network never goes idle: wait for the data instead.
      await page.locator('main .loading').waitFor({ state: 'detached' });
      await page.screenshot({ path: join(OUT, file), fullPage: true });
      console.log(`${OUT}/${file}`);
    };
    await shoot('/', 'overview.png', 'Overview');
    await shoot('/assets/batch_ready', 'asset.png', 'Asset');
    await shoot('/assets/daily_partitions', 'asset-10k-partitions.png', 'Asset');
    await shoot('/streams/orders-ingest/2026-11-30?task=ingest', 'run.png', 'Run');
    await shoot('/consumers', 'consumers.png', 'Consumer groups');
    await shoot('/rejections', 'rejections.png', 'Rejections');
  } finally {
    await browser.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
