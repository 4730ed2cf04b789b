import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SqliteDedupeStore } from '../../src/dedupe/index.js';
import { startScript } from '../support/child.js';
import { item, newKey, post, STREAM } from '../support/http.js';
import { tempDir } from '../support/temp.js';

describe('graceful shutdown', () => {
  it('on SIGTERM finishes the requests in flight, takes no new ones, and loses nothing it acknowledged', async () => {
    const dir = tempDir();
    const db = join(dir, 'server.db');
    writeFileSync(join(dir, 'assets.txt'), 'batch_ready\n');
    const server = startScript('src/cli/main.ts', ['server', '--db', db, '--port', '0', '--assets', join(dir, 'assets.txt')]);
    const url = (await server.waitFor((line) => line.event === 'listening')).url as string;

    const acknowledged: string[] = [];
    let refused = 0;
    let answered = 0;
    const client = async (id: number) => {
      for (let seq = 1; ; seq++) {
        const key = newKey();
        try {
          const answer = await post(`${url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, runId: `client-${id}` }, items: [item(seq, key)] }));
          if (answer.status === 200 && answer.json.results[0].status === 'accepted') acknowledged.push(key);
          else {
            refused++;
            // A request that reaches a closing server is refused as a problem, never half done.
            expect(answer).toMatchObject({ status: 503, contentType: expect.stringMatching(/^application\/problem\+json/), json: { code: 'shutting_down' } });
          }
          if (++answered === 150) server.signal('SIGTERM');
        } catch {
          return; // the server has closed its port
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, id) => client(id)));
    const exit = await server.done;
    expect(exit.code).toBe(0);
    expect(acknowledged.length).toBeGreaterThanOrEqual(150 - refused);

    const store = new SqliteDedupeStore({ path: db });
    const stored = new Set((await store.listEvents({ after: 0, limit: 100_000 })).events.map((event) => event.key));
    await store.close();
    for (const key of acknowledged) expect(stored.has(key)).toBe(true);
    expect(stored.size).toBe(acknowledged.length);
  });
});
