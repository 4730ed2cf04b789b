import { createServer as createHttpServer } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { openOutbox, type DeadNotice, type DeliveryProblem, type FencedNotice, type OutboxLogger } from '../../src/outbox/index.js';
import { RUN } from '../support/outbox.js';
import { startServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

/** A pino-compatible logger that keeps what it is told. */
function recordingLogger() {
  const lines: { level: string; context: Record<string, unknown>; message: string }[] = [];
  const at = (level: string) => (context: object, message: string) => void lines.push({ level, context: context as Record<string, unknown>, message });
  const logger: OutboxLogger = { info: at('info'), warn: at('warn'), error: at('error') };
  return { logger, lines, codes: () => lines.map((line) => `${line.level}:${line.context.code}`) };
}

const FAST = { retryMinDelayMs: 5, retryMaxDelayMs: 20, reportAfterMs: 100 };

async function until(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await sleep(10);
  }
}

describe('the producer is never silent', () => {
  it('with the server down: logs the failure once, tells error listeners, and close() says what is left', async () => {
    const { logger, lines, codes } = recordingLogger();
    const metrics = new Registry();
    const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'p', run: RUN, server: 'http://127.0.0.1:9', logger, metrics, ...FAST });
    const problems: DeliveryProblem[] = [];
    box.on('error', (problem) => problems.push(problem));
    for (let i = 1; i <= 3; i++) box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: `b${i}` }));
    box.commit((tx) => tx.set(box.checkpoint('progress', z.object({ batch: z.number() })), { batch: 3 }));
    await until(() => problems.length > 0);
    await sleep(300); // many more failed attempts: still one line, one event
    expect(await metrics.metrics()).toContain('oncebox_outbox_pending{producer="p"} 4');
    const result = await box.close({ timeoutMs: 0 });
    expect(result).toMatchObject({ pending: 4, pendingEvents: 3, pendingCheckpoints: 1, dead: 0, lastError: { code: 'network' } });
    expect(codes()).toEqual(['warn:network', 'warn:closed_with_work_left']);
    // Events and checkpoint updates apart, as close() and status say them.
    expect(problems).toEqual([expect.objectContaining({ code: 'network', pending: 4, pendingEvents: 3, pendingCheckpoints: 1, stopped: false })]);
    expect(lines[0]!.message).toMatch(/^oncebox relay: delivery has been failing for 0 s; retrying with the same keys: could not reach http:\/\/127\.0\.0\.1:9\/v1\/emissions.* \(3 events and 1 checkpoint update waiting\)$/);
    expect(lines[0]!.context).toMatchObject({ pending: 4, pendingEvents: 3, pendingCheckpoints: 1 });
    expect(lines[1]!.message).toMatch(/: 3 events and 1 checkpoint update not delivered yet \(they stay in the file; the next run delivers them, or `oncebox relay .* --server http:\/\/127\.0\.0\.1:9 --drain` now, with the job's token in ONCEBOX_TOKEN\); last delivery error: could not reach/);
  });

  it('with another HTTP service on the port: logs what it answered, once', async () => {
    const other = createHttpServer((_request, response) => response.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not Found</h1>'));
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const { port } = other.address() as { port: number };
    const { logger, codes, lines } = recordingLogger();
    const metrics = new Registry();
    const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'p', run: RUN, server: `http://127.0.0.1:${port}`, logger, metrics, ...FAST });
    box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'b1' }));
    await until(() => lines.length > 0);
    await sleep(200);
    expect(codes()).toEqual(['warn:http_404']);
    expect(lines[0]!.message).toContain('answered 404: <h1>Not Found</h1>');
    expect(await metrics.metrics()).toContain('oncebox_outbox_pending{producer="p"} 1');
    expect(await box.close({ timeoutMs: 0 })).toMatchObject({ pending: 1, lastError: { code: 'http_404' } });
    other.close();
  });

  it('with an unknown asset: logs the dead row, tells dead listeners, and close() counts it', async () => {
    const { url } = await startServer();
    const { logger, codes, lines } = recordingLogger();
    const metrics = new Registry();
    const box = await openOutbox({ path: join(tempDir(), 'outbox.db'), producer: 'p', run: RUN, server: url, logger, metrics, ...FAST });
    const dead: DeadNotice[] = [];
    const delivered: string[] = [];
    box.on('dead', (row) => dead.push(row));
    box.on('delivered', (rows) => delivered.push(...rows.map((row) => row.key)));
    const good = box.commit((tx) => tx.emit(box.asset('batch_ready'), { partitionKey: 'b1' }));
    box.commit((tx) => tx.emit(box.asset('not_registered'), { partitionKey: 'b2' }));
    box.commit((tx) => tx.emit(box.asset('not_registered'), { partitionKey: 'b3' }));
    await box.relay!.drain(10_000);
    expect(await metrics.metrics()).toContain('oncebox_outbox_dead_total{producer="p",code="unknown_asset"} 2');
    const result = await box.close();
    expect(result).toMatchObject({ pending: 0, dead: 2 });
    expect(dead.map((row) => row.code)).toEqual(['unknown_asset', 'unknown_asset']);
    expect(delivered).toEqual([good.key]);
    // Two dead rows of one cause: one line for them, and one at close.
    expect(codes()).toEqual(['error:unknown_asset', 'warn:closed_with_work_left']);
    expect(lines[0]!.message).toContain('`oncebox dead list` on the outbox file says what fixes it');
  });

  it('when a later attempt delivered: logs the fence and tells fenced listeners', async () => {
    const { url } = await startServer();
    const { logger, codes } = recordingLogger();
    const zombie = await openOutbox({ path: join(tempDir(), 'zombie.db'), producer: 'p', run: RUN, server: url, logger, relay: 'manual' });
    const retry = await openOutbox({ path: join(tempDir(), 'retry.db'), producer: 'p', run: { ...RUN, attempt: 2 }, server: url, relay: 'manual' });
    retry.commit((tx) => tx.emit(retry.asset('batch_ready'), { partitionKey: 'b1' }));
    await retry.relay!.step();
    const fences: FencedNotice[] = [];
    zombie.on('fenced', (fence) => fences.push(fence));
    zombie.commit((tx) => tx.emit(zombie.asset('batch_ready'), { partitionKey: 'b1' }));
    await expect(zombie.relay!.step()).rejects.toMatchObject({ code: 'fenced' });
    expect(fences).toEqual([{ runId: RUN.runId, attempt: 1, by: 2 }]);
    expect(codes()).toEqual(['warn:fenced']);
    await zombie.close({ timeoutMs: 0 });
    await retry.close({ timeoutMs: 0 });
  });
});
