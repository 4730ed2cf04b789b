import { existsSync } from 'node:fs';
import { build } from 'vite';
import { chromium, type Browser, type Page } from 'playwright-core';

/** Debian's Chromium (`apt-get install chromium`), which .ci/run installs when it is missing. */
export const CHROMIUM = process.env.ONCEBOX_CHROMIUM ?? '/usr/bin/chromium';

const missing = existsSync(CHROMIUM) ? undefined : `no Chromium at ${CHROMIUM}`;
if (missing !== undefined && process.env.CI === 'true') {
  throw new Error(`Chromium is required under CI=true for the console's browser tests, but there is ${missing}: apt-get install -y chromium, or set ONCEBOX_CHROMIUM`);
}
if (missing !== undefined) console.warn(`console browser tests skipped: ${missing} (apt-get install -y chromium, or set ONCEBOX_CHROMIUM)`);

export const chromiumAvailable = missing === undefined;
export const chromiumSkipReason = missing === undefined ? '' : ` (skipped: ${missing})`;

export async function launchChromium(): Promise<Browser> {
  // Root in a container has no user namespace for Chromium's sandbox.
  return chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
}

/** Builds the console from its sources into dist/console, where the server serves it: tests see the code as it is now. */
export async function buildConsole(): Promise<void> {
  await build({ configFile: new URL('../../console/vite.config.ts', import.meta.url).pathname, logLevel: 'error' });
}

/** Opens the console in a page and enters the token, as a user does once per tab. */
export async function signIn(page: Page, url: string, token: string): Promise<void> {
  await page.goto(`${url}/console/`);
  await page.getByLabel('Read token').fill(token);
  await page.getByRole('button', { name: 'Open the console' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
}
