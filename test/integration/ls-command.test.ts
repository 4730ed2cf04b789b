import { describe, expect, it } from 'vitest';
import type { Page, StreamSummary } from '../../src/protocol/catalog.js';
import { runScript } from '../support/child.js';
import { startServer } from '../support/server.js';

/**
 * `oncebox ls` against a real server: the rows the API lists, as aligned text or as JSON lines, a page
 * at a time with the cursor that goes on, and names from any publisher printed without the control
 * characters that would rewrite an operator's terminal.
 */
const CLI = 'src/cli/main.ts';

async function post(url: string, token: string, body: unknown): Promise<void> {
  const response = await fetch(`${url}/v1/emissions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  expect(response.status).toBe(200);
}

describe('oncebox ls', () => {
  it('lists what the API lists, page by page, as text or JSON, and escapes control characters', { timeout: 240_000 }, async () => {
    const { url, server } = await startServer({ assets: ['batch_ready'] });
    const admin = (await server.store.tokens.create({ scope: 'admin' })).token;
    const reader = (await server.store.tokens.create({ scope: 'read', reads: ['events', 'streams'] })).token;
    const hostile = 'batch-1\n\u001b[2Jforged row\u001b]0;title\u0007';
    for (const [index, runId] of ['run-a', 'run-b', 'run-c'].entries()) {
      await post(url, admin, {
        stream: { producer: 'orders-ingest', workflow: 'orders', runId, task: null, attempt: 1 },
        items: [
          { seq: 1, key: `00000000-0000-4000-8000-00000000000${index}`, kind: 'event', asset: 'batch_ready', partitionKey: index === 0 ? hostile : `batch-${index + 1}` },
          { seq: 2, key: `00000000-0000-4000-8000-00000000010${index}`, kind: 'event', asset: 'not_registered', partitionKey: 'x' },
        ],
      });
    }
    const ls = (...args: string[]) => runScript(CLI, ['ls', ...args, '--server', url], { env: { ONCEBOX_TOKEN: reader } });

    const partitions = await ls('partitions', 'batch_ready');
    expect(partitions.code, partitions.stderr).toBe(0);
    const text = partitions.lines.map((line) => line.text as string);
    expect(text[0]).toMatch(/^PARTITION\s+STATE/);
    expect(text).toHaveLength(4);
    expect(text.join('\n')).not.toMatch(/[\u0000-\u0008\u000b-\u001f]/);
    expect(text.some((line) => line.startsWith('batch-1\\u000a\\u001b[2Jforged row\\u001b]0;title\\u0007'))).toBe(true);

    const json = await ls('streams', '--json');
    expect(json.code, json.stderr).toBe(0);
    const api = (await (await fetch(`${url}/v1/catalog/streams`, { headers: { authorization: `Bearer ${reader}` } })).json()) as Page<StreamSummary>;
    expect(json.lines).toEqual(api.items);

    const first = await ls('streams', '--limit', '1');
    expect(first.lines.map((line) => line.text)).toEqual([expect.stringMatching(/^KIND\s+STREAM/), expect.stringMatching(/^run\s+orders-ingest\/run-c\s/)]);
    const after = /add --after (\S+), or --all/.exec(first.stderr)?.[1];
    expect(after, first.stderr).toBeDefined();
    const rest = await ls('streams', '--after', after!, '--json');
    expect(rest.lines.map((line) => line.runId)).toEqual(['run-b', 'run-a']);
    expect(rest.stderr).toBe('');
    const all = await ls('streams', '--all', '--limit', '1', '--json');
    expect(all.lines.map((line) => line.runId)).toEqual(['run-c', 'run-b', 'run-a']);

    const rejections = await ls('rejections', '--since', '1d', '--json');
    expect(rejections.lines.map((line) => [line.runId, line.code])).toEqual([
      ['run-c', 'unknown_asset'],
      ['run-b', 'unknown_asset'],
      ['run-a', 'unknown_asset'],
    ]);

    // Misuse: a token that may not read streams is refused at once, with the fix named.
    const metricsOnly = (await server.store.tokens.create({ scope: 'read', reads: ['metrics'] })).token;
    const refused = await runScript(CLI, ['ls', 'streams', '--server', url], { env: { ONCEBOX_TOKEN: metricsOnly } });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/streams/);
  });
});
