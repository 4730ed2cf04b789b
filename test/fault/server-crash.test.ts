import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PostgresDedupeStore, SqliteDedupeStore } from '../../src/dedupe/index.js';
import { startScript } from '../support/child.js';
import { item, newKey, post, STREAM } from '../support/http.js';
import { PG_URL, pgAvailable, pgSkipReason, testSchema } from '../support/postgres.js';
import { tempDir } from '../support/temp.js';

const CLIENTS = 8;
const ITEMS_PER_CLIENT = 30;
/** The commit shared by several requests that the server dies after: late enough that every client has requests in flight. */
const KILLED_AT = 3;

describe.each([
  { backend: 'sqlite', skip: false, reason: '' },
  { backend: 'postgres', skip: !pgAvailable, reason: pgSkipReason },
])('the server killed with SIGKILL after a group commit, before its answers ($backend$reason)', ({ backend, skip }) => {
  it.skipIf(skip)('loses nothing: every request of the killed group, sent again, is answered as the duplicate of what that commit stored', async () => {
    const dir = tempDir();
    const schema = testSchema();
    const db = backend === 'sqlite' ? ['--db', join(dir, 'server.db')] : ['--db', PG_URL, '--schema', schema];
    writeFileSync(join(dir, 'assets.txt'), 'batch_ready\n');
    const serve = (port: number, env: Record<string, string> = {}) =>
      startScript('src/cli/main.ts', ['server', ...db, '--port', String(port), '--assets', join(dir, 'assets.txt')], env);
    const first = serve(0, { ONCEBOX_FAILPOINT: `ingest:after-shared-commit@${KILLED_AT}` });
    const url = (await first.waitFor((line) => line.event === 'listening')).url as string;
    const port = Number(new URL(url).port);

    // Each client is one stream, sending one item at a time and each again until it gets an answer, as a relay does.
    const sent = new Map<string, { client: number; seq: number }>();
    const receipts = new Map<string, { status: string; eventId: string }[]>();
    let restarted: ReturnType<typeof serve> | undefined;
    let restarting: Promise<void> | undefined;
    const restart = () =>
      (restarting ??= (async () => {
        const exit = await first.done;
        expect(exit.signal).toBe('SIGKILL');
        expect(exit.lines).toContainEqual(expect.objectContaining({ failpoint: 'ingest:after-shared-commit', kill: true }));
        restarted = serve(port);
        await restarted.waitFor((line) => line.event === 'listening');
      })());
    const client = async (id: number) => {
      for (let seq = 1; seq <= ITEMS_PER_CLIENT; seq++) {
        const key = newKey();
        sent.set(key, { client: id, seq });
        const body = JSON.stringify({ stream: { ...STREAM, runId: `client-${id}` }, items: [item(seq, key, { partitionKey: `c${id}-${seq}` })] });
        for (;;) {
          try {
            const answer = await post(`${url}/v1/emissions`, body);
            expect(answer.status).toBe(200);
            receipts.set(key, [...(receipts.get(key) ?? []), answer.json.results[0]]);
            break;
          } catch {
            await restart();
          }
        }
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, (_, id) => client(id)));
    restarted!.signal('SIGTERM');
    await restarted!.done;

    const store = backend === 'sqlite' ? new SqliteDedupeStore({ path: db[1]! }) : await PostgresDedupeStore.open({ connectionString: PG_URL, schema });
    const stored = (await store.listEvents({ after: 0, limit: 10_000 })).events;
    await store.close();
    // Every item once, each stream in its order.
    expect(stored).toHaveLength(CLIENTS * ITEMS_PER_CLIENT);
    expect(new Set(stored.map((event) => event.key)).size).toBe(stored.length);
    for (let id = 0; id < CLIENTS; id++) {
      expect(stored.filter((event) => event.runId === `client-${id}`).map((event) => event.seq)).toEqual(Array.from({ length: ITEMS_PER_CLIENT }, (_, i) => i + 1));
    }
    // Each answer names the event stored for its key.
    const byKey = new Map(stored.map((event) => [event.key, event.eventId]));
    for (const [key, answers] of receipts) {
      expect(answers).toHaveLength(1);
      expect(answers[0]!.eventId).toBe(byKey.get(key));
    }
    // The requests of the killed group were committed, not answered: sent again, each is a duplicate. There were several.
    const duplicates = [...receipts.values()].filter((answers) => answers[0]!.status === 'duplicate');
    expect(duplicates.length).toBeGreaterThanOrEqual(2);
    expect(duplicates.length).toBeLessThanOrEqual(CLIENTS);
    expect(sent.size).toBe(CLIENTS * ITEMS_PER_CLIENT);
  });
});
