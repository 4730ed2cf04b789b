import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { FencedError, openOutbox } from '../../src/outbox/index.js';
import { runScript, startScript, type StartedScript } from '../support/child.js';
import { startFaultProxy, type Fault } from '../support/fault-proxy.js';
import { item, newKey, post, STREAM } from '../support/http.js';
import { advisoryKey } from '../../src/dedupe/postgres/migrate.js';
import { PG_URL, pgAvailable, pgSkipReason, testSchema } from '../support/postgres.js';
import { allEvents } from '../support/server.js';
import { tempDir } from '../support/temp.js';

interface Instance {
  url: string;
  process: StartedScript;
}

/** Two `oncebox server` processes over one PostgreSQL schema, started at the same moment. */
async function twoInstances(): Promise<[Instance, Instance]> {
  const schema = testSchema();
  const assets = join(tempDir(), 'assets.txt');
  writeFileSync(assets, 'batch_ready\n');
  const start = () => startScript('src/cli/main.ts', ['server', '--db', PG_URL, '--schema', schema, '--port', '0', '--assets', assets]);
  const processes = [start(), start()];
  const urls = await Promise.all(processes.map((p) => p.waitFor((line) => line.event === 'listening')));
  return [
    { url: urls[0]!.url as string, process: processes[0]! },
    { url: urls[1]!.url as string, process: processes[1]! },
  ];
}

describe.skipIf(!pgAvailable)(`several server instances on one PostgreSQL${pgSkipReason}`, () => {
  it('16 concurrent clients sending the same keys to both instances get one event per key and identical receipts', async () => {
    const [a, b] = await twoInstances();
    const keys = Array.from({ length: 20 }, () => newKey());
    const answers = await Promise.all(
      Array.from({ length: 16 }, (_, client) =>
        post(
          `${(client % 2 ? a : b).url}/v1/emissions`,
          JSON.stringify({ stream: { ...STREAM, runId: `client-${client}` }, items: keys.map((key, i) => item(i + 1, key, { partitionKey: key })) }),
        ),
      ),
    );
    for (const [i, key] of keys.entries()) {
      const receipts = answers.map((answer) => answer.json.results[i]);
      expect(receipts.filter((r) => r.status === 'accepted')).toHaveLength(1);
      expect(new Set(receipts.map((r) => `${r.key} ${r.eventId} ${r.timestamp}`))).toEqual(new Set([`${key} ${receipts[0].eventId} ${receipts[0].timestamp}`]));
    }
    expect((await allEvents(a.url)).map((e) => e.key).sort()).toEqual([...keys].sort());
  });

  it('never answers 5xx to clients claiming the same keys in opposite orders (no deadlock reaches a client)', async () => {
    const [a, b] = await twoInstances();
    for (let round = 0; round < 3; round++) {
      const keys = Array.from({ length: 1000 }, () => newKey());
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, client) => {
          const ordered = client % 2 ? [...keys].reverse() : keys;
          const stream = { ...STREAM, runId: `round-${round}-client-${client}` };
          return post(`${(client % 2 ? a : b).url}/v1/emissions`, JSON.stringify({ stream, items: ordered.map((key, i) => item(i + 1, key, { partitionKey: key })) }));
        }),
      );
      expect(answers.map((answer) => answer.status)).toEqual(Array(8).fill(200));
      const accepted = answers.flatMap((answer) => answer.json.results.filter((r: { status: string }) => r.status === 'accepted').map((r: { key: string }) => r.key));
      expect(accepted.sort()).toEqual([...keys].sort());
    }
  });

  it("keeps two tasks of one run apart across instances: one task's retry fences its own zombie, never the other task", async () => {
    const [a, b] = await twoInstances();
    const stream = (task: string, attempt: number) => ({ ...STREAM, runId: 'dag-run', task, attempt });
    const send = (instance: Instance, task: string, attempt: number, seq: number, partitionKey: string) =>
      post(`${instance.url}/v1/emissions`, JSON.stringify({ stream: stream(task, attempt), items: [item(seq, newKey(), { partitionKey })] }));
    const statusOf = async (answer: Promise<{ json: { results: { status: string }[] } }>) => (await answer).json.results[0]!.status;
    // Interleaved across the instances, each task at its own positions.
    expect(await statusOf(send(a, 'extract', 1, 1, 'extract-1'))).toBe('accepted');
    expect(await statusOf(send(b, 'load', 1, 1, 'load-1'))).toBe('accepted');
    expect(await statusOf(send(b, 'extract', 1, 2, 'extract-2'))).toBe('accepted');
    expect(await statusOf(send(a, 'load', 1, 2, 'load-2'))).toBe('accepted');
    // extract's retry delivers through b: extract's attempt 1 is fenced on a, load's attempt 1 goes on there.
    expect(await statusOf(send(b, 'extract', 2, 1, 'extract-3'))).toBe('accepted');
    expect(await statusOf(send(a, 'extract', 1, 3, 'extract-zombie'))).toBe('fenced');
    expect(await statusOf(send(a, 'load', 1, 3, 'load-3'))).toBe('accepted');
    const stored = (await allEvents(a.url)).map((e) => `${e.task}/${e.partitionKey}@${e.attempt}`);
    expect(stored.filter((e) => e.startsWith('extract/'))).toEqual(['extract/extract-1@1', 'extract/extract-2@1', 'extract/extract-3@2']);
    expect(stored.filter((e) => e.startsWith('load/'))).toEqual(['load/load-1@1', 'load/load-2@1', 'load/load-3@1']);
  });

  it('keeps a stream exact while the relay fails over between instances on every other request', async () => {
    const [a, b] = await twoInstances();
    const proxies = await Promise.all([startFaultProxy(a.url), startFaultProxy(b.url)]);
    // Each instance loses every second acknowledgement after storing the batch: the retry lands on the other.
    for (const proxy of proxies) proxy.plan(...Array.from({ length: 40 }, (_, i): Fault => (i % 2 ? 'drop-response' : 'forward')));
    const box = await openOutbox({
      path: join(tempDir(), 'outbox.db'),
      server: proxies.map((p) => p.url),
      producer: 'p',
      run: { workflow: 'w', runId: 'failover', attempt: 1 },
      batchMaxRows: 3,
      retryMinDelayMs: 1,
      retryMaxDelayMs: 5,
    });
    const ready = box.asset('batch_ready');
    for (let batch = 1; batch <= 30; batch++) box.commit((tx) => tx.emit(ready, { partitionKey: `batch-${batch}` }));
    expect(await box.close({ timeoutMs: 30_000 })).toMatchObject({ pending: 0, dead: 0 });
    const events = await allEvents(b.url);
    expect(events.map((e) => e.partitionKey)).toEqual(Array.from({ length: 30 }, (_, i) => `batch-${i + 1}`));
    expect(events.map((e) => e.seq)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(proxies.every((p) => p.stats.forwarded > 3)).toBe(true);
  });

  it('fences a zombie that talks to one instance once its retry delivered through the other', async () => {
    const [a, b] = await twoInstances();
    const dir = tempDir();
    const options = (attempt: number, server: string) => ({
      path: join(dir, `attempt-${attempt}.db`),
      server,
      producer: 'p',
      relay: 'manual' as const,
      run: { workflow: 'w', runId: 'zombie-run', attempt },
    });
    const zombie = await openOutbox(options(1, a.url));
    zombie.commit((tx) => tx.emit(zombie.asset('batch_ready'), { partitionKey: 'batch-1' }));
    expect(await zombie.relay!.step()).toBe(1);
    const retry = await openOutbox(options(2, b.url));
    retry.commit((tx) => tx.emit(retry.asset('batch_ready'), { partitionKey: 'batch-1' }));
    retry.commit((tx) => tx.emit(retry.asset('batch_ready'), { partitionKey: 'batch-2' }));
    expect(await retry.relay!.step()).toBe(2);
    zombie.commit((tx) => tx.emit(zombie.asset('batch_ready'), { partitionKey: 'batch-2' }));
    await expect(zombie.relay!.step()).rejects.toBeInstanceOf(FencedError);
    expect(() => zombie.commit(() => undefined)).toThrow(FencedError);
    expect((await allEvents(a.url)).map((e) => [e.partitionKey, e.attempt])).toEqual([['batch-1', 1], ['batch-2', 2]]);
    await zombie.close({ timeoutMs: 0 });
    await retry.close({ timeoutMs: 0 });
  });

  it('never accepts a zombie item after its retry delivered, when both hit different instances at the same instant', async () => {
    const [a, b] = await twoInstances();
    for (let round = 0; round < 40; round++) {
      const runId = `race-${round}`;
      const batch = (attempt: number, fromSeq: number, count: number) =>
        JSON.stringify({ stream: { ...STREAM, runId, attempt }, items: Array.from({ length: count }, (_, i) => item(fromSeq + i, newKey())) });
      // Attempt 1 has delivered before; now it and attempt 2 send at once, each to its own instance.
      await post(`${a.url}/v1/emissions`, batch(1, 1, 1));
      await Promise.all([post(`${a.url}/v1/emissions`, batch(1, 2, 10)), post(`${b.url}/v1/emissions`, batch(2, 1, 10))]);
      const events = (await allEvents(a.url)).filter((e) => e.runId === runId);
      const attempts = events.map((e) => e.attempt);
      expect(attempts, `round ${round}`).toEqual([...attempts].sort((x, y) => x - y));
    }
  });

  it('delivers every committed emission once when one instance is SIGKILLed mid-run and the relay fails over', async () => {
    const [a, b] = await twoInstances();
    const dir = tempDir();
    const job = runScript('examples/batch-ingest.ts', [
      '--db', join(dir, 'outbox.db'), '--server', a.url, '--server', b.url, '--data', join(dir, 'data'),
      '--run-id', 'failover-crash', '--batches', '120', '--pause-ms', '10',
    ], {
      onLine: (line) => {
        if (line.event === 'committed' && line.batch === 40) a.process.signal('SIGKILL');
      },
    });
    const result = await job;
    expect(result.code, result.stderr).toBe(0);
    expect((await a.process.done).signal).toBe('SIGKILL');
    const events = await allEvents(b.url);
    expect(events.map((e) => e.partitionKey)).toEqual(Array.from({ length: 120 }, (_, i) => `batch-${String(i + 1).padStart(4, '0')}`));
  });

  it('does not let a reader skip an event whose transaction commits after later ones', async () => {
    const schema = testSchema();
    const server = startScript('src/cli/main.ts', ['server', '--db', PG_URL, '--schema', schema, '--port', '0']);
    const url = (await server.waitFor((line) => line.event === 'listening')).url as string;
    await fetch(`${url}/v1/assets/batch_ready`, { method: 'PUT' });
    // A writer that has inserted its event, as an ingest does (under the cursors' lock), and not
    // committed yet, as a slow ingest transaction would.
    const slow = new pg.Client({ connectionString: PG_URL });
    await slow.connect();
    await slow.query('BEGIN');
    await slow.query('SELECT pg_advisory_xact_lock($1)', [advisoryKey(schema, 'cursors')]);
    const lateEvent = newKey();
    await slow.query(
      `INSERT INTO "${schema}".events (event_id, key, ts, asset, producer, workflow, run_id, task, attempt, seq)
       VALUES ($1, $2, '2026-11-30T00:00:00.000Z', 'batch_ready', 'p', 'w', 'slow', NULL, 1, 1)`,
      [lateEvent, newKey()],
    );
    // A later request's events would take cursors above the slow one's: it waits until that commits.
    const later = [newKey(), newKey()];
    const posting = post(`${url}/v1/emissions`, JSON.stringify({ stream: STREAM, items: later.map((key, i) => item(i + 1, key)) }));
    expect(await Promise.race([posting.then(() => 'answered'), new Promise((resolve) => setTimeout(() => resolve('waiting'), 500))])).toBe('waiting');
    const before: any = await (await fetch(`${url}/v1/events`)).json();
    expect(before.events).toEqual([]);
    await slow.query('COMMIT');
    await slow.end();
    expect((await posting).status).toBe(200);
    const after: any = await (await fetch(`${url}/v1/events?after=${before.next}`)).json();
    expect(after.events.map((e: { eventId: string; key: string }) => (e.eventId === lateEvent ? 'late' : e.key))).toEqual(['late', ...later]);
  });

  it('lets six readers paging by cursor at once see every event exactly once while two instances write concurrently', async () => {
    const [a, b] = await twoInstances();
    const writers = 12;
    const perWriter = 12;
    let writing = true;
    // Six readers at once: each read runs the sequencer, so several run at the same moment on both instances.
    const readers = Array.from({ length: 6 }, async (_, reader) => {
      const seen: string[] = [];
      let after = 0;
      for (let idle = 0, read = 0; writing || idle < 2; read++) {
        const response = await fetch(`${((reader + read) % 2 ? a : b).url}/v1/events?after=${after}&limit=50`);
        expect(response.status, `reader ${reader}: ${response.status === 200 ? '' : await response.clone().text()}`).toBe(200);
        const page: any = await response.json();
        seen.push(...page.events.map((e: { key: string }) => e.key));
        after = page.next;
        idle = page.events.length === 0 && !writing ? idle + 1 : 0;
      }
      return seen;
    });
    await Promise.all(
      Array.from({ length: writers }, async (_, writer) => {
        for (let request = 0; request < perWriter; request++) {
          const items = Array.from({ length: 20 }, (_, i) => item(request * 20 + i + 1, newKey()));
          const answer = await post(`${(writer % 2 ? a : b).url}/v1/emissions`, JSON.stringify({ stream: { ...STREAM, runId: `writer-${writer}` }, items }));
          expect(answer.status).toBe(200);
        }
      }),
    );
    writing = false;
    for (const seen of await Promise.all(readers)) {
      expect(seen).toHaveLength(writers * perWriter * 20);
      expect(new Set(seen).size).toBe(seen.length);
    }
  });
});
