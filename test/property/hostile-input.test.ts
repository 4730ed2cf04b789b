import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProblemCode } from '../../src/protocol/errors.js';
import { item, newKey, post, STREAM } from '../support/http.js';
import { startServer, type RunningServer } from '../support/server.js';

/**
 * Generated malformed requests. Whatever arrives, the server answers 4xx problem+json (or, for a sound
 * envelope, a per-item rejection), never crashes, keeps serving, and its stored events stay as they were.
 */

const SEED = Number(process.env.ONCEBOX_SEED ?? Date.now() % 2 ** 31);
const PROBLEM_CODES = new Set<string>(Object.values(ProblemCode));

async function seededServer(): Promise<{ server: RunningServer; baseline: string }> {
  const server = await startServer({ bodyLimit: 256 * 1024 });
  const seeded = await post(
    `${server.url}/v1/emissions`,
    JSON.stringify({ stream: { ...STREAM, runId: 'baseline' }, items: [item(1, newKey()), item(2, newKey())] }),
  );
  expect(seeded.json.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'accepted']);
  return { server, baseline: JSON.stringify(await server.events()) };
}

async function expectStillServingAndUnchanged(server: RunningServer, baseline: string) {
  expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  expect(JSON.stringify(await server.events())).toBe(baseline);
}

const deep = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
const hostileText = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.string({ unit: 'binary', maxLength: 200 }),
  fc.json({ maxDepth: 4 }),
  fc.constantFrom(
    '',
    'null',
    '[]',
    '{"stream":',
    '{"__proto__":{"polluted":true},"stream":{},"items":[]}',
    '{"stream":{"constructor":{"prototype":{"polluted":true}}},"items":[]}',
    `{"stream":${JSON.stringify(STREAM)},"items":${deep(10_000)}}`,
    `{"stream":${JSON.stringify(STREAM)},"items":["${'x'.repeat(300 * 1024)}"]}`,
    '{"stream":{"producer":1e999},"items":[]}',
    '\uFEFF{}',
  ),
);

/** A value that is wrong for `field` by type, size, format or range. */
const badValue: Record<string, fc.Arbitrary<unknown>> = {
  seq: fc.oneof(fc.constantFrom(0, -1, 1.5, '1', null, true, 2 ** 60), fc.double({ noInteger: true })),
  key: fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom(null, 7, '00000000-0000-0000-0000-00000000000g')),
  kind: fc.oneof(fc.string({ maxLength: 10 }).filter((s) => s !== 'event'), fc.constant(null)),
  asset: fc.oneof(fc.constantFrom('', ' bad', '../../etc/passwd', 'x'.repeat(201), null, 5), fc.array(fc.string(), { maxLength: 2 })),
  partitionKey: fc.oneof(fc.constantFrom('', null, 42, {}, 'x'.repeat(513)), fc.array(fc.nat(), { maxLength: 2 })),
  partitionDate: fc.oneof(
    fc.string({ maxLength: 30 }).filter((s) => !/^\d{4}-\d\d-\d\dT/.test(s)),
    fc.constantFrom('2026-13-01T00:00:00Z', '2026-02-30T00:00:00Z', '2026-11-30T25:00:00Z', '2026-11-30T00:00:00', '2026-11-30T00:00:00+24:00', 12),
  ),
  extra: fc.oneof(
    fc.constantFrom('x', 1, true, [1, 2], { big: 'x'.repeat(70_000) }),
    fc.constant(JSON.parse('{"a":'.repeat(40) + '1' + '}'.repeat(40))),
  ),
  unknownField: fc.constant('surprise'),
};

describe('hostile input to the server', () => {
  it('answers any malformed body with 4xx problem+json and a stable code (or, around a sound envelope, per-item rejections)', async () => {
    const { server, baseline } = await seededServer();
    await fc.assert(
      fc.asyncProperty(hostileText, fc.constantFrom('application/json', 'text/plain', 'application/x-www-form-urlencoded'), async (body, type) => {
        const answer = await post(`${server.url}/v1/emissions`, body, { 'content-type': type });
        if (answer.status === 200) {
          // A sound envelope around a nonsense item: the item alone is rejected.
          expect(answer.json.results.every((r: { status: string }) => r.status === 'rejected' || r.status === 'gap')).toBe(true);
          return;
        }
        expect(answer.status).toBeGreaterThanOrEqual(400);
        expect(answer.status).toBeLessThan(500);
        expect(answer.contentType).toMatch(/^application\/problem\+json/);
        expect(PROBLEM_CODES.has(answer.json.code)).toBe(true);
        expect(answer.json.status).toBe(answer.status);
      }),
      { numRuns: 150, seed: SEED },
    );
    await expectStillServingAndUnchanged(server, baseline);
  });

  it('rejects each item with a broken field by itself, storing nothing', async () => {
    const { server, baseline } = await seededServer();
    const field = fc.constantFrom(...Object.keys(badValue));
    const brokenItem = field.chain((name) =>
      badValue[name]!.map((value) => ({ name, value })),
    );
    let runId = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(brokenItem, { minLength: 1, maxLength: 5 }), async (broken) => {
        runId++;
        const items = broken.map(({ name, value }, i) => {
          const good: Record<string, unknown> = item(i + 1, newKey());
          if (name === 'unknownField') good.surprise = value;
          else good[name] = value;
          return good;
        });
        const answer = await post(`${server.url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, runId: `hostile-${runId}` }, items }));
        if (answer.status !== 200) {
          // Only a body the size limit refuses as a whole may fail as a whole.
          expect(answer.json.code).toBe('body_too_large');
          return;
        }
        for (const result of answer.json.results) {
          expect(['rejected', 'gap']).toContain(result.status);
          if (result.status === 'rejected') expect(['invalid_item', 'unknown_asset']).toContain(result.code);
        }
      }),
      { numRuns: 200, seed: SEED },
    );
    await expectStillServingAndUnchanged(server, baseline);
  });

  it('refuses hostile query strings on GET /v1/events with problem+json', async () => {
    const { server, baseline } = await seededServer();
    await fc.assert(
      fc.asyncProperty(
        fc.record({ after: fc.string({ maxLength: 8 }), limit: fc.string({ maxLength: 8 }), asset: fc.string({ maxLength: 8 }) }, { requiredKeys: [] }),
        async (query) => {
          const response = await fetch(`${server.url}/v1/events?${new URLSearchParams(query as Record<string, string>)}`);
          expect(response.status === 200 || (response.status === 400 && response.headers.get('content-type')!.startsWith('application/problem+json'))).toBe(true);
        },
      ),
      { numRuns: 150, seed: SEED },
    );
    await expectStillServingAndUnchanged(server, baseline);
  });
});
