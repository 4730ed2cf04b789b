import { expect } from './violation.js';
import type { Tenant, World } from './world.js';

/** Reads the flooding reader sends at once: more than the catalog's whole queue (64), so that a reader that could take every place would. */
const FLOOD = 72;
const PATH = '/v1/catalog/streams?limit=200';

/**
 * A tenant's reader loops over the catalog (a dashboard gone wild): FLOOD reads at once. The catalog
 * queues a few of them and tells it to wait for the rest (503 with Retry-After); another tenant's read,
 * sent while the flood waits, is taken (not refused for the flood's sake) and answered in its turn, before
 * the flood has all its answers; and a job's delivery goes through meanwhile (G27: the catalog never holds
 * a publisher or another tenant up).
 */
export async function floodCatalog(world: World, flooder: Tenant, other: Tenant, deliver: () => Promise<void>): Promise<void> {
  world.happened("a tenant's reader flooded the catalog");
  const order: string[] = [];
  let firstAnswered: () => void = () => undefined;
  const firstTaken = new Promise<void>((resolve) => (firstAnswered = resolve));
  const read = (tenant: Tenant, label: string) =>
    world.fetch(PATH, { headers: { authorization: `Bearer ${tenant.tokens.reader}` } }).then(async (response) => {
      const text = await response.text();
      if (response.status === 200) {
        order.push(label);
        if (label === 'flood') firstAnswered();
      }
      return { status: response.status, text, retryAfter: response.headers.get('retry-after') };
    });
  const flood = Array.from({ length: FLOOD }, () => read(flooder, 'flood'));
  // The other tenant asks once the flood is at the gate: its first read has been let through, the rest wait or were turned away.
  await firstTaken;
  const answeredBefore = order.length;
  const asked = read(other, 'other');
  await deliver();
  const answers = await Promise.all(flood);
  const mine = await asked;
  for (const answer of [...answers, mine]) {
    expect('no 5xx', answer.status === 200 || answer.status === 503, () => `a catalog read answered ${answer.status}: ${answer.text.slice(0, 200)}`);
  }
  const turnedAway = answers.filter((answer) => answer.status === 503);
  expect('G27', turnedAway.every((answer) => answer.retryAfter !== null), () => `the catalog turned a flooding reader away without Retry-After`);
  expect('G27', mine.status === 200, () => `${other.name}'s one catalog read was refused while ${flooder.name}'s reader flooded the catalog: ${mine.status} ${mine.text.slice(0, 200)}`);
  // In turn by token: the other tenant's read waits for a flood read or two, not for every one queued before it.
  const after = order.slice(answeredBefore);
  const queued = after.filter((label) => label === 'flood').length;
  expect('G27', queued < 3 || after.indexOf('other') < after.length - 1, () => `${other.name}'s catalog read waited for all ${queued} reads ${flooder.name}'s reader had queued: ${after.join(' ')}`);
}
