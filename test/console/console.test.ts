import { join } from 'node:path';
import type { Browser, BrowserContext, Page, Request } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CATALOG_PAGE_ROWS, type AssetSummary, type ConsumerGroup, type Overview, type Page as ListPage, type PartitionPage, type Rejection, type StreamDetail } from '../../src/protocol/catalog.js';
import type { EventPage } from '../../src/protocol/wire.js';
import { buildConsole, chromiumAvailable, chromiumSkipReason, launchChromium, signIn } from '../support/chromium.js';
import { buildConsoleScene, publishPartitions, type ConsoleScene } from '../support/console-scene.js';
import { createServer, type OnceboxServer } from '../../src/dedupe/index.js';
import { tempDir } from '../support/temp.js';
import { Limits } from '../../src/protocol/limits.js';
import { openOutbox } from '../../src/outbox/index.js';
import { openConsumer } from '../../src/consumer/index.js';

/**
 * The web console in a real browser (Debian's Chromium), against a real server holding real events made
 * by the real producer and consumer: a retry absorbed, a zombie fenced, a consumer lagging, a refusal,
 * and an asset of 10,000 partitions. Every figure on a page is checked against the API it came from.
 */
describe.skipIf(!chromiumAvailable)(`the web console${chromiumSkipReason}`, () => {
  // Its own server, not the helper's, which closes after each test: the scene serves the whole file.
  let running: { server: OnceboxServer; url: string };
  let scene: ConsoleScene;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  /** Every request the console made, for the checks on what travels where. */
  const requests: Request[] = [];

  const api = async <T>(route: string): Promise<T> => {
    const response = await fetch(`${running.url}/${route}`, { headers: { authorization: `Bearer ${scene.consoleToken}` } });
    expect(response.status, route).toBe(200);
    return (await response.json()) as T;
  };
  const dataRequests = (pattern: RegExp) => requests.filter((request) => pattern.test(new URL(request.url()).pathname));
  const open = async (fragment: string, heading: string | RegExp) => {
    await page.goto(`${running.url}/console/#${fragment}`);
    await page.getByRole('heading', { level: 1, name: heading }).waitFor();
    await page.locator('main .loading').waitFor({ state: 'detached' });
  };

  beforeAll(async () => {
    await buildConsole();
    const dir = tempDir();
    const server = await createServer({ db: join(dir, 'server.db'), assets: ['batch_ready'], logger: false });
    running = { server, url: await server.listen({ port: 0 }) };
    scene = await buildConsoleScene(running.server, running.url, dir);
    await running.server.store.registerAsset('daily_partitions');
    await publishPartitions(running.url, scene.adminToken, 'daily_partitions', 10_000);
    browser = await launchChromium();
    context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    context.on('request', (request) => requests.push(request));
    page = await context.newPage();
    await signIn(page, running.url, scene.consoleToken);
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await running?.server.close();
  });

  it('asks for a read token, drops a refused one with the reason, and keeps the token out of URLs, cookies and local storage', async () => {
    // A new tab of its own: nothing signed in yet.
    const tab = await context.newPage();
    try {
      await tab.goto(`${running.url}/`);
      expect(new URL(tab.url()).pathname).toBe('/console/');
      await tab.getByLabel('Read token').fill('not-a-token');
      await tab.getByRole('button', { name: 'Open the console' }).click();
      await expect(tab.getByRole('alert').textContent()).resolves.toMatch(/refused that token/);
      await tab.getByLabel('Read token').fill(scene.consoleToken);
      await tab.getByRole('button', { name: 'Open the console' }).click();
      await tab.getByRole('heading', { name: 'Overview' }).waitFor();

      const stored = await tab.evaluate('({ session: sessionStorage.length, local: localStorage.length, cookie: document.cookie })');
      expect(stored).toEqual({ session: 1, local: 0, cookie: '' });
      const apiRequests = dataRequests(/^\/v1\//);
      expect(apiRequests.length).toBeGreaterThan(0);
      for (const request of apiRequests) expect(request.url()).not.toContain(scene.consoleToken);
      const signedIn = apiRequests.filter((request) => request.headers().authorization === `Bearer ${scene.consoleToken}`);
      expect(signedIn.length).toBeGreaterThan(0);
      expect(tab.url()).not.toContain(scene.consoleToken);
    } finally {
      await tab.close();
    }
  });

  it('shows on the overview what GET /v1/catalog says: assets, runs in progress, lag and the last day of rejections', async () => {
    await open('/', 'Overview');
    const overview = await api<Overview>('v1/catalog');
    await expect(page.getByTestId('tile-assets').textContent()).resolves.toBe(String(overview.assets.items.length));
    await expect(page.getByTestId('tile-running').textContent()).resolves.toBe(String(overview.running.items.length));
    await expect(page.getByTestId('tile-lagging').textContent()).resolves.toBe(String(overview.consumers.items.filter((group) => (group.lag ?? 0) > 0).length));
    await expect(page.getByTestId('tile-rejections').textContent()).resolves.toBe(String(overview.rejections.lastDay));
    expect(overview.rejections.lastDay).toBe(1);

    const shown = await page.locator('section[aria-labelledby="assets-heading"] tbody tr').evaluateAll((rows) =>
      rows.map((row) => [row.getAttribute('data-asset'), ...[...row.querySelectorAll('td.num')].map((cell) => cell.textContent)]),
    );
    expect(shown).toEqual(overview.assets.items.map((asset) => [asset.name, asset.events.toLocaleString('en'), asset.partitions.toLocaleString('en'), asset.duplicates.toLocaleString('en')]));
    const running = await page.locator('section[aria-labelledby="running-heading"] tbody tr').evaluateAll((rows) => rows.map((row) => row.getAttribute('data-stream')));
    expect(running).toEqual(overview.running.items.map((stream) => [stream.producer, stream.runId, stream.task].filter((part) => part !== null).join('/')));
    expect(running).toContain('orders-ingest/2026-12-01/ingest');
  });

  it('lists an asset\'s partitions as the API does, each linking to its event and to the run and attempt that produced it', async () => {
    await open('/', 'Overview');
    await page.getByRole('link', { name: 'batch_ready', exact: true }).first().click();
    await page.getByRole('heading', { level: 1, name: /Asset batch_ready/ }).waitFor();
    const grid = page.getByTestId('partitions');
    await grid.locator('[data-partition="2026-11-24"]').waitFor();
    const partitions = await api<PartitionPage>('v1/catalog/assets/batch_ready/partitions');
    const rows = await grid.locator('[role=row]').evaluateAll((found) => found.map((row) => [...row.querySelectorAll('[role=cell]')].map((cell) => cell.textContent?.replace(/\s+/g, ' ').trim())));
    expect(rows.map((cells) => cells.slice(0, 4))).toEqual(partitions.items.map((partition) => [partition.partitionKey, partition.state, String(partition.events), String(partition.duplicates)]));
    // The retry on a fresh machine: its first batches were absorbed, the one it reached alone was not;
    // the next day's run published 2026-11-21 again.
    expect(Object.fromEntries(partitions.items.map((partition) => [partition.partitionKey, partition.state]))).toEqual({
      '2026-11-21': 'republished',
      '2026-11-22': 'deduplicated',
      '2026-11-23': 'deduplicated',
      '2026-11-24': 'published',
    });
    await expect(page.getByTestId('asset-duplicates').textContent()).resolves.toBe(String(partitions.asset.duplicates));

    const partition = partitions.items.find((item) => item.partitionKey === '2026-11-22')!;
    const row = grid.locator('[data-partition="2026-11-22"]');
    await row.getByRole('link', { name: `event ${partition.event.cursor}` }).click();
    await page.getByRole('heading', { level: 1, name: `Event ${partition.event.cursor}` }).waitFor();
    const shownEvent = JSON.parse((await page.getByTestId('event-json').textContent())!) as { eventId: string; attempt: number };
    expect(shownEvent.eventId).toBe(partition.event.eventId);
    await page.goBack();
    await grid.locator('[data-partition="2026-11-22"]').getByRole('link', { name: `orders-ingest/2026-11-30/ingest · ${partition.event.attempt}` }).click();
    await page.getByRole('heading', { level: 1, name: /Run orders-ingest\/2026-11-30\/ingest/ }).waitFor();
    expect(new URL(page.url()).search).toBe('');
  });

  it('shows a run as the API does: the retry\'s duplicates absorbed, the zombie fenced by the retry, the outcome', async () => {
    // A link opened anew (a colleague's, a bookmark): the task rides in the fragment, with the route.
    await open('/streams/orders-ingest/2026-11-30?task=ingest', /Run orders-ingest\/2026-11-30\/ingest/);
    const run = await api<StreamDetail>('v1/catalog/streams/orders-ingest/2026-11-30?task=ingest');
    expect(run).toMatchObject({ epoch: 2, outcome: 'succeeded', duplicates: 3, fencedAttempts: [1] });
    await expect(page.getByTestId('run-epoch').textContent()).resolves.toBe('2');
    await expect(page.getByTestId('run-outcome').textContent()).resolves.toBe('succeeded');
    await expect(page.getByTestId('run-duplicates').textContent()).resolves.toBe('3');
    await expect(page.getByTestId('fenced-by-1').textContent()).resolves.toBe('attempt 2');
    await expect(page.getByTestId('fenced-by-2').textContent()).resolves.toBe('current');
    const attempts = await page.locator('tr[data-attempt]').evaluateAll((rows) => rows.map((row) => [...row.querySelectorAll('td.num')].map((cell) => Number(cell.textContent))));
    expect(attempts).toEqual(run.attempts.map((attempt) => [attempt.lastSeq, attempt.duplicates, attempt.fencedItems]));
    expect(run.attempts.find((attempt) => attempt.attempt === 1)?.fencedItems).toBe(1);
    await expect(page.locator('.lifecycle li').first().getAttribute('data-outcome')).resolves.toBe('succeeded');

    await open('/streams/orders-ingest/2026-12-01?task=ingest', /Run orders-ingest\/2026-12-01\/ingest/);
    await expect(page.getByTestId('run-outcome').textContent()).resolves.toBe('running · retry to come');
    await expect(page.locator('.lifecycle li[data-outcome="failed"]').textContent()).resolves.toMatch(/upstream export missing.*kept for the retry/);
    await expect(page.locator('.rejections li').getAttribute('data-code')).resolves.toBe('unknown_asset');
  });

  it('shows consumer groups with their lag, and rejections with the reason and the command that fixes them', async () => {
    await open('/consumers', 'Consumer groups');
    const groups = await api<ListPage<ConsumerGroup>>('v1/catalog/consumers');
    const summariser = groups.items.find((group) => group.group === scene.group)!;
    expect(summariser.lag).toBeGreaterThan(0);
    await expect(page.locator(`tr[data-group="${scene.group}"] [data-testid=lag]`).textContent()).resolves.toBe(String(summariser.lag));

    await open('/rejections', 'Rejections');
    const rejections = await api<ListPage<Rejection>>('v1/catalog/rejections');
    expect(rejections.items).toHaveLength(1);
    const item = page.locator('.rejections li');
    await expect(item.getAttribute('data-code')).resolves.toBe(rejections.items[0]!.code);
    await expect(item.locator('.detail').textContent()).resolves.toBe(rejections.items[0]!.detail);
    await expect(item.locator('.fix').textContent()).resolves.toContain('oncebox dead retry');
    await expect(page.locator('main').textContent()).resolves.toContain('oncebox dead retry <outbox file> --all');
  });

  it('updates a view through the long-poll when an event arrives, without reloading', async () => {
    await open('/assets/batch_ready', /Asset batch_ready/);
    const before = await api<ListPage<AssetSummary>>('v1/catalog/assets?prefix=batch_ready');
    await page.evaluate('window.stillHere = true');
    await publishPartitions(running.url, scene.adminToken, 'batch_ready', 1);
    await page.getByTestId('partitions').locator('[data-partition="p-00000"]').waitFor({ timeout: 10_000 });
    await expect(page.getByTestId('asset-events').textContent()).resolves.toBe(String(before.items[0]!.events + 1));
    expect(await page.evaluate('window.stillHere')).toBe(true);
    await expect(page.getByTestId('live').textContent()).resolves.toBe('live');
  });

  it('makes one list request per view, not one per row', async () => {
    await open('/', 'Overview');
    const asset = '/v1/catalog/assets/batch_ready/partitions';
    const before = dataRequests(/^\/v1\/(catalog|events)/).length;
    await page.getByRole('link', { name: 'batch_ready', exact: true }).first().click();
    await page.getByTestId('partitions').locator('[data-partition="2026-11-24"]').waitFor();
    const made = dataRequests(/^\/v1\/(catalog|events)/).slice(before).map((request) => new URL(request.url()).pathname);
    expect(made.filter((path) => path !== '/v1/events')).toEqual([asset]);
  });

  it('is usable with the keyboard alone: sign in, skip to content, move through the navigation, reach the last of 10,000 partitions', async () => {
    const keyboard = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    try {
      await keyboard.goto(`${running.url}/console/`);
      await keyboard.keyboard.press('Tab');
      await expect(keyboard.evaluate('document.activeElement?.id')).resolves.toBe('token');
      await keyboard.keyboard.type(scene.consoleToken);
      await keyboard.keyboard.press('Enter');
      await keyboard.getByRole('heading', { name: 'Overview' }).waitFor();

      await keyboard.keyboard.press('Tab');
      await expect(keyboard.evaluate('document.activeElement?.textContent?.trim()')).resolves.toBe('Skip to content');
      await keyboard.keyboard.press('Enter');
      await expect(keyboard.evaluate('document.activeElement?.id')).resolves.toBe('main');

      // The navigation, from the top: Overview, then Assets.
      await keyboard.keyboard.press('Shift+Tab');
      const focused = () => keyboard.evaluate('document.activeElement?.textContent?.trim()');
      for (let presses = 0; presses < 10 && (await focused()) !== 'Assets'; presses++) await keyboard.keyboard.press('Shift+Tab');
      await expect(focused()).resolves.toBe('Assets');
      await keyboard.keyboard.press('Enter');
      await keyboard.getByRole('heading', { level: 1, name: 'Assets' }).waitFor();
      // The heading comes before the list it heads: on a busy machine the tabs would pass over a list not there yet.
      await keyboard.getByRole('link', { name: 'daily_partitions', exact: true }).first().waitFor();
      for (let presses = 0; presses < 20 && (await focused()) !== 'daily_partitions'; presses++) await keyboard.keyboard.press('Tab');
      await expect(focused()).resolves.toBe('daily_partitions');
      await keyboard.keyboard.press('Enter');
      await keyboard.getByRole('heading', { level: 1, name: /Asset daily_partitions/ }).waitFor();

      const grid = keyboard.getByTestId('partitions');
      await grid.locator('[data-partition="p-00000"]').waitFor();
      for (let presses = 0; presses < 40 && !(await grid.evaluate((element) => element === element.ownerDocument.activeElement)); presses++) await keyboard.keyboard.press('Tab');
      await keyboard.keyboard.press('End');
      await grid.locator('[data-partition="p-09999"]').waitFor({ timeout: 30_000 });
      await keyboard.keyboard.press('Home');
      await grid.locator('[data-partition="p-00000"]').waitFor();
    } finally {
      await keyboard.context().close();
    }
  });

  it('stays quick with 10,000 partitions: a bounded number of rows in the page, fetched a page at a time', async () => {
    const before = requests.length;
    await open('/assets/daily_partitions', /Asset daily_partitions/);
    const grid = page.getByTestId('partitions');
    await grid.locator('[data-partition="p-00000"]').waitFor();
    await expect(grid.getAttribute('aria-rowcount')).resolves.toBe('10000');
    await expect(page.getByTestId('asset-partitions').textContent()).resolves.toBe('10,000');
    const rendered = () => grid.locator('[role=row]').count();
    expect(await rendered()).toBeLessThan(60);

    // Scrolled to the end: the last partition shows, still with few rows in the page.
    await grid.evaluate((element) => element.scrollTo(0, element.scrollHeight));
    await grid.locator('[data-partition="p-09999"]').waitFor({ timeout: 30_000 });
    expect(await rendered()).toBeLessThan(60);
    const pages = requests.slice(before).filter((request) => new URL(request.url()).pathname === '/v1/catalog/assets/daily_partitions/partitions');
    expect(pages.length).toBeLessThanOrEqual(10_000 / CATALOG_PAGE_ROWS + 1);
    const rowIndex = await grid.locator('[data-partition="p-09999"]').getAttribute('aria-rowindex');
    expect(rowIndex).toBe('10000');

    // What the API lists last is what the grid shows last.
    const last = await api<PartitionPage>('v1/catalog/assets/daily_partitions/partitions?limit=1000&prefix=p-099');
    expect(last.items.at(-1)?.partitionKey).toBe('p-09999');
  });

  it('answers a view the token may not read in that view, and keeps the token; a token of no use here goes back to the form', async () => {
    const limited = (await running.server.store.tokens.create({ scope: 'read', reads: ['events', 'streams'], producers: 'orders-ingest', note: 'one producer' })).token;
    const tab = await (await browser.newContext()).newPage();
    try {
      await signIn(tab, running.url, limited);
      // A link to another producer's run: refused (403) in the view, the console still open.
      await tab.goto(`${running.url}/console/#/streams/backfill/daily_partitions`);
      // Waited for by its text: the view may show another alert (its loading state) first.
      await tab.getByRole('alert').filter({ hasText: /reads only the streams of producers matching "orders-ingest"/ }).waitFor();
      await expect(tab.evaluate('sessionStorage.length')).resolves.toBe(1);
      await tab.getByRole('link', { name: 'Overview' }).click();
      await tab.getByTestId('tile-assets').waitFor();

      // A token that reads no events nor streams is of no use: back to the form, with the server's reason.
      const metrics = (await running.server.store.tokens.create({ scope: 'read', reads: ['metrics'], note: 'scraper' })).token;
      await tab.evaluate(`sessionStorage.setItem('oncebox.console.token', ${JSON.stringify(metrics)})`);
      await tab.reload();
      await tab.getByRole('alert').filter({ hasText: /refused that token: .*reads both events and streams/ }).waitFor();
      await tab.waitForFunction('sessionStorage.length === 0');
    } finally {
      await tab.context().close();
    }
  });

  it('moves from one run to another with one request for the new view, never the new run with the old run\'s task', async () => {
    await open(`/streams/${scene.run.producer}/${scene.run.runId}?task=${scene.run.task}`, /^Run /);
    const before = requests.length;
    // The consumer group's stream has no task: a request that kept ?task=ingest would be a 404 for it.
    await page.evaluate(`location.hash = '#/streams/summariser/summariser'`);
    await page.getByRole('heading', { level: 1, name: /^Consumer group / }).waitFor();
    await page.locator('main .loading').waitFor({ state: 'detached' });
    const made = requests.slice(before).map((request) => new URL(request.url())).filter((url) => url.pathname.startsWith('/v1/catalog/streams/'));
    expect(made.map((url) => `${url.pathname}${url.search}`)).toEqual(['/v1/catalog/streams/summariser/summariser']);
  });

  it('shows Not found for a link with a malformed escape, and goes on working', async () => {
    await open('/assets/%E0%A4%A', 'Not found');
    await open('/streams/%ZZ/x', 'Not found');
    await open('/', 'Overview');
    await expect(page.getByTestId('tile-assets').textContent()).resolves.toMatch(/^\d+$/);
  });

  it('says when a page does not exist or an event is gone', async () => {
    await open('/nowhere', 'Not found');
    const events = await api<EventPage>('v1/events?after=0&limit=1');
    expect(events.events.length).toBe(1);
    await page.goto(`${running.url}/console/#/events/999999`);
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/No event 999999 here/);
    await expect(page.getByTestId('live').textContent()).resolves.toBe('live');
  });
});

/**
 * The longest names, keys and messages the server takes, and text that would turn the page's direction
 * around (an unclosed U+202E), in every field a view shows: no view is wider than the window, each long
 * value is cut with an ellipsis and whole in its title, and the console's own words around a value read
 * the right way round.
 */
describe.skipIf(!chromiumAvailable)(`the web console with the longest legal values${chromiumSkipReason}`, () => {
  let server: OnceboxServer;
  let url: string;
  let browser: Browser;
  let token: string;
  const RTL = '\u202E';
  const asset = `a${'b'.repeat(Limits.maxAssetNameLength - 1)}`;
  const producer = `p${'r'.repeat(Limits.maxNameLength - 1)}`;
  const runId = `${RTL}run${'n'.repeat(Limits.maxNameLength - 4)}`;
  const task = `t${'k'.repeat(Limits.maxNameLength - 1)}`;
  const partitionKey = `${RTL}${'k'.repeat(Limits.maxPartitionKeyLength - 1)}`;

  beforeAll(async () => {
    await buildConsole();
    const dir = tempDir();
    server = await createServer({ db: join(dir, 'server.db'), assets: [asset], logger: false });
    url = await server.listen({ port: 0 });
    const admin = (await server.store.tokens.create({ scope: 'admin' })).token;
    token = (await server.store.tokens.create({ scope: 'read', reads: ['events', 'streams'] })).token;
    const box = await openOutbox({ path: join(dir, 'job.db'), server: url, token: admin, producer, run: { workflow: 'w', runId, task, attempt: 1 }, logger: { info() {}, warn() {}, error() {} } });
    await box.commit((tx) => tx.emit(box.asset(asset), { partitionKey, extra: { note: `${RTL}${'x'.repeat(3000)}` } })).receipt();
    // An asset nobody registered, refused: the rejection shows the longest name again.
    await box
      .commit((tx) => tx.emit(box.asset(`z${'y'.repeat(Limits.maxAssetNameLength - 1)}`), { partitionKey }))
      .receipt()
      .catch(() => undefined);
    const consumer = await openConsumer({ path: join(dir, 'group.db'), server: url, token: admin, group: `g${'g'.repeat(Limits.maxNameLength - 1)}`, assets: [asset], waitSeconds: 0.2, logger: { info() {}, warn() {}, error() {} } });
    const stop = new AbortController();
    await consumer.run(() => stop.abort(), { signal: stop.signal });
    await consumer.close();
    await box.fail(new Error(`${RTL}${'m'.repeat(999)}`)).event?.receipt();
    await box.close();
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  it('keeps every view within the window, cuts each long value with the whole in its title, and isolates text that turns direction (shows it, in the server\'s sentences)', async () => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    await signIn(page, url, token);
    const run = `/streams/${encodeURIComponent(producer)}/${encodeURIComponent(runId)}?task=${encodeURIComponent(task)}`;
    const views = ['/', '/assets', `/assets/${encodeURIComponent(asset)}`, '/streams', run, '/consumers', '/rejections', '/events/1'];
    for (const view of views) {
      await page.goto(`${url}/console/#${view}`);
      await page.locator('main h1').waitFor();
      await page.locator('main .loading').waitFor({ state: 'detached' });
      const shown = await page.evaluate(`(() => {
        const texts = [...document.querySelectorAll('main bdi.text')];
        const reversed = [...document.querySelectorAll('main *')].filter((element) =>
          [...element.childNodes].some((node) => node.nodeType === 3 && node.textContent.includes('${RTL}')) &&
          !(element.closest('bdi') || element.closest('pre')));
        return {
          width: document.documentElement.scrollWidth,
          texts: texts.length,
          untitled: texts.filter((element) => element.getAttribute('title') !== element.textContent).length,
          notIsolated: texts.filter((element) => getComputedStyle(element).unicodeBidi !== 'isolate').length,
          unclosed: reversed.map((element) => element.tagName),
        };
      })()`);
      expect({ view, ...(shown as object) }).toEqual({ view, width: 1280, texts: expect.any(Number), untitled: 0, notIsolated: 0, unclosed: [] });
      expect((shown as { texts: number }).texts, view).toBeGreaterThan(0);
    }
    // A link to a task the run does not have: the server's sentence repeats the run id, whose direction
    // control is shown as its code point rather than turning the sentence's own words.
    await page.goto(`${url}/console/#${run.replace(/task=[^&]*/, 'task=missing')}`);
    const refusal = page.getByRole('alert').first();
    await refusal.waitFor();
    await expect(refusal.textContent()).resolves.toMatch(/<U\+202E>run/);
    // The console's own words after a value that turns direction: "… ago" reads as written, after the value.
    await page.goto(`${url}/console/#/rejections`);
    await page.locator('main .rejections li').first().waitFor();
    const line = await page.locator('main .rejections li p').first().evaluate((element: any) => {
      // Its first character drawn left of its last: read left to right, not turned around by the key before it.
      const text = element.querySelector('time').firstChild;
      const at = (offset: number) => {
        const range = element.ownerDocument.createRange();
        range.setStart(text, offset);
        range.setEnd(text, offset + 1);
        return range.getBoundingClientRect().left;
      };
      return { leftToRight: at(0) < at(text.length - 1), time: text.textContent };
    });
    expect(line).toEqual({ leftToRight: true, time: expect.stringMatching(/ ago$/) });
  });
});

