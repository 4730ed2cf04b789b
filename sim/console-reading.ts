import type { Browser, Page } from 'playwright-core';
import type { AssetSummary, Page as CatalogPage, StreamDetail } from '../src/protocol/catalog.js';
import { buildConsole, chromiumAvailable, launchChromium, signIn } from '../test/support/chromium.js';
import { Limits } from '../src/protocol/limits.js';
import { openOutbox } from '../src/outbox/index.js';
import { RUN_ID } from './batch.js';
import type { SimTask } from './jobs.js';
import { Violation, expect } from './violation.js';
import { QUIET_LOGGER, type Tenant, type World } from './world.js';

/** How long a view may take to show what it waits for on a busy machine before the console is called stuck. */
const VIEW_WAIT_MS = 60_000;
const WIDTH = 1280;
/** A character that turns the text after it right to left until it is closed: a value must not turn the console's own words. */
const RTL = '\u202E';

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
  const longRun = await publishLongValues(world, tenant);
  const context = await (await consoleBrowser()).newContext({ viewport: { width: WIDTH, height: 900 } });
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

    // The longest values the server takes, starting with a turn of direction: no view grows wider than
    // the window, and each value is isolated (or its direction control shown), so that the console's
    // own words read as written.
    // The last is a link to a task that run does not have: the server's refusal repeats the run id.
    const longRunView = `/streams/${task.producer}/${encodeURIComponent(longRun)}`;
    for (const fragment of ['/', `${longRunView}?task=task0`, `${longRunView}?task=missing`]) {
      await view(page, world, fragment, /./, label);
      const layout = (await page.evaluate(`(() => {
        const texts = [...document.querySelectorAll('main bdi.text')];
        const turned = [...document.querySelectorAll('main *')].filter((element) =>
          [...element.childNodes].some((node) => node.nodeType === 3 && node.textContent.includes('${RTL}')) && !(element.closest('bdi') || element.closest('pre')));
        return { width: document.documentElement.scrollWidth, notIsolated: texts.filter((element) => getComputedStyle(element).unicodeBidi !== 'isolate').length, unclosed: turned.map((element) => element.tagName) };
      })()`)) as { width: number; notIsolated: number; unclosed: string[] };
      expect('G27', layout.width <= WIDTH, () => `${label}: the view ${fragment} is ${layout.width} px wide in a window of ${WIDTH}, with the longest values`);
      expect('G27', layout.notIsolated === 0 && layout.unclosed.length === 0, () => `${label}: the view ${fragment} leaves a value's direction open (${layout.notIsolated} values not isolated; text turning direction in ${JSON.stringify(layout.unclosed)})`);
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

/**
 * An event with the longest partition key the server takes, in a run with the longest run id, each
 * starting with a turn of direction left open: what a careless publisher sends, published once a world
 * with the tenant's job token under a run of its own. Returns the run id.
 */
async function publishLongValues(world: World, tenant: Tenant): Promise<string> {
  const runId = `${RTL}run${'n'.repeat(Limits.maxNameLength - 4)}`;
  if (published.get(world) === tenant.name) return runId;
  const box = await openOutbox({
    path: world.newPath(`${tenant.name}-long-values`),
    server: world.proxy.url,
    token: tenant.tokens.job,
    producer: `${tenant.name}-job`,
    run: { workflow: 'sim', runId, task: 'task0', attempt: 1 },
    durability: 'normal',
    now: () => world.clock,
    logger: QUIET_LOGGER,
  });
  box.commit((tx) => tx.emit(box.asset(tenant.assets.ready), { partitionKey: `${RTL}${'k'.repeat(Limits.maxPartitionKeyLength - 1)}` }));
  const closed = await box.close({ timeoutMs: 60_000 });
  expect('liveness', closed.pending === 0, () => `${tenant.name}: the event with the longest values was not delivered in a minute`);
  published.set(world, tenant.name);
  return runId;
}

const published = new WeakMap<World, string>();
