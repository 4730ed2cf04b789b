import type { Browser, Page } from 'playwright-core';
import type { AssetSummary, Page as CatalogPage, StreamDetail } from '../src/protocol/catalog.js';
import { buildConsole, chromiumAvailable, launchChromium, signIn } from '../test/support/chromium.js';
import { RUN_ID } from './batch.js';
import type { SimTask } from './jobs.js';
import { Violation, expect } from './violation.js';
import type { Tenant, World } from './world.js';

/** How long a view may take to show what it waits for on a busy machine before the console is called stuck. */
const VIEW_WAIT_MS = 60_000;

let browser: Promise<Browser> | undefined;

/** One Chromium for the simulation's process, and the console built once from its sources (as the server serves it). */
function consoleBrowser(): Promise<Browser> {
  browser ??= buildConsole().then(() => launchChromium());
  return browser;
}

/** Closes the simulation's browser, if it started one. */
export async function closeConsoleBrowser(): Promise<void> {
  const started = browser;
  browser = undefined;
  await (await started?.catch(() => undefined))?.close();
}

/**
 * A tenant's operator reads the web console in a real browser while the runs go on (G17, G27): signed in
 * with the tenant's read token, the overview and a task's run show what the API says and nothing of
 * another tenant; a link to another tenant's run is refused in its view and the console stays signed in;
 * a link with a malformed escape shows Not found and the console goes on; an asset's page counts the
 * batch `publish` delivers meanwhile through the long-poll, without a reload; and the token never leaves
 * the tab (no request URL, no local storage, no cookie). Without Chromium the reading is skipped and
 * said so, except under CI=true, where it is a failure (test/support/chromium.ts).
 */
export async function readConsole(world: World, tenant: Tenant, other: Tenant, task: SimTask, publish: () => Promise<boolean>): Promise<void> {
  if (!chromiumAvailable) {
    world.happened('console not read (no Chromium)');
    return;
  }
  const context = await (await consoleBrowser()).newContext({ viewport: { width: 1280, height: 900 } });
  const urls: string[] = [];
  context.on('request', (request) => urls.push(request.url()));
  const page = await context.newPage();
  const token = tenant.tokens.reader;
  const label = `${tenant.name}'s console`;
  try {
    await shown(label, 'sign in', () => signIn(page, world.url, token));
    await noNamesOf(page, other, label, 'the overview');

    // The task's run, by a link with its task in the query, as a colleague shares it (once the server has heard of it).
    const route = `/streams/${task.producer}/${RUN_ID}?task=${task.name}`;
    const answer = await world.fetch(`/v1/catalog${route}`, { headers: { authorization: `Bearer ${token}` } });
    if (answer.status === 200) {
      const run = (await answer.json()) as StreamDetail;
      await view(page, world, route, /^Run /, label);
      const epoch = page.getByTestId('run-epoch');
      await shown(label, `the epoch of ${task.name}'s run`, () => epoch.waitFor({ timeout: VIEW_WAIT_MS }));
      const shownEpoch = await epoch.textContent();
      expect('G27', shownEpoch === String(run.epoch), () => `${label}: the run of ${task.name} shows epoch ${shownEpoch}, the API ${run.epoch}`);
      await noNamesOf(page, other, label, `the run of ${task.name}`);
    } else {
      await answer.body?.cancel();
    }

    // Another tenant's run: refused in its view; the console stays signed in and goes on.
    await page.goto(`${world.url}/console/#/streams/${other.name}-job/${RUN_ID}?task=task0`);
    await shown(label, "another tenant's run refused in its view", () => page.getByRole('alert').filter({ hasText: /reads only|may not|forbidden/i }).first().waitFor({ timeout: VIEW_WAIT_MS }));
    expect('G27', (await page.evaluate('sessionStorage.length')) === 1, () => `${label}: a link to another tenant's run signed its user out`);
    await noNamesOf(page, other, label, "the refusal of another tenant's run", { except: `${other.name}-job` });

    // A link with a malformed escape: Not found, and the console goes on.
    await view(page, world, '/assets/%E0%A4%A', 'Not found', label);

    // The asset's page follows the events as they come, through the long-poll.
    await view(page, world, `/assets/${tenant.assets.ready}`, /^Asset /, label);
    await page.evaluate('window.stillHere = true');
    const before = await assetEvents(world, tenant, token);
    if (await publish()) {
      const after = await assetEvents(world, tenant, token);
      await shown(label, `the asset's count move from ${before} to ${after} without a reload`, () =>
        page.getByTestId('asset-events').filter({ hasText: new RegExp(`^${after.toLocaleString('en-US')}$`) }).waitFor({ timeout: VIEW_WAIT_MS }),
      );
      expect('G27', (await page.evaluate('window.stillHere')) === true, () => `${label}: the asset's page reloaded to show a new event`);
    }

    const leaked = urls.filter((url) => url.includes(token.slice(-43)));
    expect('G17', leaked.length === 0, () => `${label}: the read token travelled in a URL: ${leaked[0]}`);
    expect('G17', (await page.evaluate('localStorage.length')) === 0 && (await context.cookies()).length === 0, () => `${label}: the read token outlives the tab (local storage or a cookie)`);
    world.happened('the console read beside the runs');
  } finally {
    await context.close();
  }
}

/** Opens a view by its link and waits for its heading; a view that never shows is a violation with its route. */
async function view(page: Page, world: World, fragment: string, heading: string | RegExp, label: string): Promise<void> {
  await page.goto(`${world.url}/console/#${fragment}`);
  await shown(label, `the view ${fragment}`, async () => {
    await page.getByRole('heading', { level: 1, name: heading }).waitFor({ timeout: VIEW_WAIT_MS });
    await page.locator('main .loading').waitFor({ state: 'detached', timeout: VIEW_WAIT_MS });
  });
}

/** Waits for what the console should show; a wait that never ends (a crash, a view that never loads) is a G27 violation. */
async function shown(label: string, what: string, wait: () => Promise<unknown>): Promise<void> {
  try {
    await wait();
  } catch (error) {
    throw new Violation('G27', `${label}: never showed ${what}: ${(error as Error).message.split('\n')[0]}`);
  }
}

/** G17: nothing of `other` on the page (its producers and assets), but what the reader typed itself. */
async function noNamesOf(page: Page, other: Tenant, label: string, where: string, options: { except?: string } = {}): Promise<void> {
  let text = (await page.locator('main').textContent()) ?? '';
  if (options.except !== undefined) text = text.split(options.except).join('');
  const names = [`${other.name}-`, `${other.name}.`];
  expect('G17', names.every((name) => !text.includes(name)), () => `${label}: ${where} shows a name of ${other.name}: ${text.slice(0, 300)}`);
}

/** The tenant's `ready` events as the catalog counts them. */
async function assetEvents(world: World, tenant: Tenant, token: string): Promise<number> {
  const response = await world.fetch(`/v1/catalog/assets?prefix=${encodeURIComponent(tenant.assets.ready)}`, { headers: { authorization: `Bearer ${token}` } });
  const page = (await response.json()) as CatalogPage<AssetSummary>;
  return page.items.find((item) => item.name === tenant.assets.ready)?.events ?? 0;
}
