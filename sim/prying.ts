import { randomUUID } from 'node:crypto';
import { LifecycleAsset, outcomeKey } from '../src/protocol/lifecycle.js';
import { expect } from './violation.js';
import type { Tenant, World } from './world.js';

/** The run a prying tenant publishes its probes in: its refusals are expected, apart from its jobs' run. */
export const PRY_RUN = 'pry';

/**
 * `text` (an answer's JSON) without the prying tenant's own refusals: they name the other tenant's asset
 * it sent, in its own words, which is no leak. Any list item that is a refusal in PRY_RUN goes.
 */
export function withoutPryRefusals(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text, (_key, value: unknown) => (Array.isArray(value) ? value.filter((item) => !(typeof item === 'object' && item !== null && (item as { runId?: unknown }).runId === PRY_RUN)) : value)));
  } catch {
    return text;
  }
}

/**
 * What a tenant's tokens get when they reach for another tenant's things (G17): the victim's events,
 * streams, checkpoints, catalog pages, consumer groups and refusals; the operator's metrics and tokens;
 * and writes: publishing as the victim's producer, to the victim's assets, and claiming an attempt of the
 * victim's run (which would fence its live attempt). Each read is refused, or answers nothing of the
 * victim; each write is refused, whole or item by item; nothing answers 5xx.
 */
export async function pry(world: World, prier: Tenant, victim: Tenant): Promise<void> {
  world.happened('a tenant pried at another');
  const { tokens } = prier;
  const reads: [token: string, path: string][] = [];
  for (const token of [tokens.reader, tokens.job, tokens.consumer, tokens.closer]) {
    reads.push(
      [token, `/v1/events?asset=${victim.assets.ready}&after=0`],
      [token, `/v1/events?asset=${victim.assets.summary}&after=0`],
      [token, '/v1/events?after=0&limit=1000'],
      [token, `/v1/events?asset=${prier.assets.ready}&after=0&group=${victim.name}-summariser`],
      [token, `/v1/streams/${victim.name}-job/r?task=task0`],
      [token, '/metrics'],
      [token, '/v1/tokens'],
    );
  }
  reads.push(
    [tokens.reader, `/v1/catalog/streams/${victim.name}-job/r?task=task0`],
    [tokens.reader, `/v1/catalog/assets/${victim.assets.ready}/partitions`],
    [tokens.reader, `/v1/catalog/streams?producer=${victim.name}-job`],
    [tokens.reader, `/v1/catalog/consumers?producer=${victim.name}-summariser`],
    [tokens.reader, `/v1/catalog/rejections?producer=${victim.name}-job`],
    [tokens.reader, `/v1/catalog/assets?prefix=${victim.name}`],
    [tokens.reader, '/v1/catalog'],
  );
  // A token made up from the victim's token id and another secret, while the victim's grant is cached on the instance.
  const forged = victim.tokens.reader.replace(/_[A-Za-z0-9_-]{43}$/, `_${'x'.repeat(43)}`);
  reads.push([forged, `/v1/events?asset=${victim.assets.ready}&after=0`], [forged, '/v1/catalog/streams?limit=5']);
  for (const [token, path] of reads) {
    const response = await world.fetch(path, { headers: { authorization: `Bearer ${token}` } });
    const text = withoutPryRefusals(await response.text());
    expect('no 5xx', response.status < 500, () => `GET ${path} by ${prier.name} answered ${response.status}: ${text.slice(0, 200)}`);
    const leaks = response.ok && (text.includes(`${victim.name}.`) || text.includes(`${victim.name}-`));
    expect('G17', !leaks, () => `GET ${path} with a token of ${prier.name} answered ${response.status} with ${victim.name}'s things: ${text.slice(0, 300)}`);
  }

  const item = (asset: string) => ({ seq: 1, key: randomUUID(), kind: 'event', asset, partitionKey: 'pried' });
  const writes: [what: string, path: string, body: unknown][] = [
    ['publish as the victim', '/v1/emissions', { stream: { producer: `${victim.name}-job`, workflow: 'sim', runId: 'r', task: 'task0', attempt: 999 }, items: [item(victim.assets.ready)] }],
    ['publish to the victim\'s asset', '/v1/emissions', { stream: { producer: `${prier.name}-job`, workflow: 'sim', runId: PRY_RUN, task: null, attempt: 1 }, items: [item(victim.assets.ready)] }],
    ['claim an attempt of the victim\'s run', `/v1/streams/${victim.name}-job/r/attempts`, { task: 'task0', atLeast: 999 }],
    ['claim the victim\'s consumer group', `/v1/streams/${victim.name}-summariser/${victim.name}-summariser/attempts`, { task: null, atLeast: 1 }],
  ];
  await failureUnderSuccessKey(world, prier);

  for (const token of [tokens.job, tokens.consumer, tokens.closer]) {
    for (const [what, path, body] of writes) {
      const response = await world.fetch(path, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const text = await response.text();
      expect('no 5xx', response.status < 500, () => `POST ${path} (${what}) by ${prier.name} answered ${response.status}: ${text.slice(0, 200)}`);
      const refused = !response.ok || (path === '/v1/emissions' && (JSON.parse(text) as { results: { status: string }[] }).results.every((result) => result.status === 'rejected'));
      expect('G17', refused, () => `${prier.name}'s token could ${what}: ${response.status} ${text.slice(0, 300)}`);
    }
  }
}

/**
 * The prying tenant's job token sends its own run's failure under the key of that run's success (on a
 * stream of its own: a task no one else writes). Stored, it would hold the key, and the real success
 * would conflict with it for good: the server takes a lifecycle event only under its outcome's key (G17).
 */
async function failureUnderSuccessKey(world: World, prier: Tenant): Promise<void> {
  const producer = `${prier.name}-job`;
  const run = { workflow: 'sim', runId: PRY_RUN, task: `forged-${randomUUID().slice(0, 8)}` };
  const failure = { outcome: 'failed', ...run, attempt: 1, error: { message: 'pried' }, willRetry: true, held: 0 };
  const item = { seq: 1, key: outcomeKey(producer, run, 'succeeded', 0), kind: 'event', asset: LifecycleAsset.Failed, extra: failure };
  const response = await world.fetch('/v1/emissions', {
    method: 'POST',
    headers: { authorization: `Bearer ${prier.tokens.job}`, 'content-type': 'application/json' },
    body: JSON.stringify({ stream: { producer, ...run, attempt: 1 }, items: [item] }),
  });
  const text = await response.text();
  expect('no 5xx', response.status < 500, () => `a failure under its run's success key answered ${response.status}: ${text.slice(0, 200)}`);
  const stored = response.ok && (JSON.parse(text) as { results: { status: string }[] }).results[0]?.status !== 'rejected';
  expect('G17', !stored, () => `${prier.name}'s job token stored a failure under its run's success key: ${response.status} ${text.slice(0, 300)}`);
}
