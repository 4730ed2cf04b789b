import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CommitEndedError, openConsumer, type ConsumeContext, type ConsumeTransaction, type Consumer, type StoredEvent } from '../../src/consumer/index.js';
import { AsyncCommitError, FencedError, OptionsError } from '../../src/protocol/errors.js';
import { openOutbox } from '../../src/outbox/index.js';
import { startServer, type RunningServer } from '../support/server.js';
import { tempDir } from '../support/temp.js';

const quiet = { info() {}, warn() {}, error() {} };

async function publish(url: string, dir: string, asset: string, partitions: string[], producer = 'orders-job'): Promise<void> {
  const box = await openOutbox({ path: join(dir, `${producer}.db`), server: url, producer, run: { workflow: 'wf', runId: 'r1', attempt: 1 }, logger: quiet });
  for (const partitionKey of partitions) await box.asset(asset).emit({ partitionKey });
  await box.close();
}

/** Runs the consumer (`start`) until `done` says so, then stops it. */
async function runUntil(start: (signal: AbortSignal) => Promise<unknown>, done: () => boolean): Promise<unknown> {
  const stop = new AbortController();
  const running = start(stop.signal);
  const watcher = setInterval(() => {
    if (done()) stop.abort();
  }, 10);
  try {
    return await running;
  } finally {
    clearInterval(watcher);
  }
}

function counterTable(consumer: Consumer): void {
  consumer.db.exec('CREATE TABLE IF NOT EXISTS counts (partition_key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
}

function counts(consumer: Consumer): Record<string, number> {
  const rows = consumer.db.prepare('SELECT partition_key, n FROM counts ORDER BY partition_key').all() as { partition_key: string; n: number }[];
  return Object.fromEntries(rows.map((row) => [row.partition_key, row.n]));
}

describe('a consumer', () => {
  let server: RunningServer;

  it('and an outbox tell their last cursor and status after close(), and say a checkpoint read then is too late', async () => {
    server = await startServer({ assets: ['orders_ready'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['a', 'b', 'c']);
    const consumer = await openConsumer({ path: join(dir, 'consumer.db'), server: server.url, group: 'closer', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2 });
    await runUntil((signal) => consumer.run((_event, ctx) => ctx.commit(() => undefined), { signal }), () => consumer.cursor === 3);
    await consumer.close();
    // A job that logs what it did after closing reads what close() left, not a closed database's error.
    expect(consumer.cursor).toBe(3);
    expect(consumer.status()).toMatchObject({ cursor: 3, pending: 0 });

    const box = await openOutbox({ path: join(dir, 'job.db'), server: server.url, producer: 'orders-job', run: { workflow: 'wf', runId: 'r2', attempt: 1 }, logger: quiet });
    const progress = box.checkpoint('progress', z.number());
    await box.commit((tx) => {
      tx.set(progress, 1);
      return tx.emit(box.asset('orders_ready'), { partitionKey: 'd' });
    }).receipt();
    await box.close();
    expect(box.status()).toMatchObject({ pending: 0, delivered: 1, dead: 0 });
    expect(() => progress.get()).toThrow(expect.objectContaining({ code: 'outbox_closed', message: expect.stringContaining('read checkpoints before close()') }));
  });

  it('stops after the event in hand when its signal aborts, not after the rest of the page, and resumes with the next', async () => {
    server = await startServer({ assets: ['orders_ready'] });
    const dir = tempDir();
    const partitions = Array.from({ length: 60 }, (_, i) => `p-${String(i).padStart(2, '0')}`);
    await publish(server.url, dir, 'orders_ready', partitions);
    const path = join(dir, 'consumer.db');
    const consumer = await openConsumer({ path, server: server.url, group: 'aborter', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2, batchSize: 100 });
    const stop = new AbortController();
    const seen: string[] = [];
    const result = await consumer.run(
      (event, ctx) => {
        seen.push(event.partitionKey!);
        ctx.commit(() => undefined);
        if (seen.length === 5) stop.abort();
      },
      { signal: stop.signal },
    );
    expect(result.processed).toBe(5);
    expect(seen).toEqual(partitions.slice(0, 5));
    expect(consumer.cursor).toBe(5);
    // The next run goes on from the sixth.
    const next: string[] = [];
    const rest = await runUntil((signal) => consumer.run((event, ctx) => void (next.push(event.partitionKey!), ctx.commit(() => undefined)), { signal }), () => consumer.cursor >= 60);
    expect(rest).toEqual({ processed: 55 });
    expect(next).toEqual(partitions.slice(5));
    await consumer.close();
  });

  it('applies each event once with its cursor, and emits derived events the server keeps once', async () => {
    server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['2026-11-28', '2026-11-29', '2026-11-30']);
    const consumer = await openConsumer({ path: join(dir, 'consumer.db'), server: server.url, group: 'summariser', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2 });
    counterTable(consumer);
    const result = await runUntil(
      (signal) =>
        consumer.run(
          (event, ctx) =>
            ctx.commit((tx) => {
              tx.db.prepare('INSERT INTO counts VALUES (?, 1) ON CONFLICT DO UPDATE SET n = n + 1').run(event.partitionKey);
              tx.emit('orders_summarised', { partitionKey: event.partitionKey! });
            }),
          { signal },
        ),
      () => consumer.cursor >= 3,
    );
    expect(result).toEqual({ processed: 3 });
    expect(counts(consumer)).toEqual({ '2026-11-28': 1, '2026-11-29': 1, '2026-11-30': 1 });
    expect((await consumer.close()).pending).toBe(0);
    const summaries = await server.events({ asset: 'orders_summarised' });
    expect(summaries.map((e) => [e.partitionKey, e.depth, e.producer])).toEqual([
      ['2026-11-28', 1, 'summariser'],
      ['2026-11-29', 1, 'summariser'],
      ['2026-11-30', 1, 'summariser'],
    ]);
    const sources = await server.events({ asset: 'orders_ready' });
    expect(summaries.map((e) => e.causedBy)).toEqual(sources.map((e) => e.eventId));
  });

  it('refuses at open a group of more assets than the server counts a lag over, naming the option and the bound', async () => {
    server = await startServer({ assets: ['orders_ready'] });
    const assets = Array.from({ length: 101 }, (_, i) => `asset_${i}`);
    await expect(openConsumer({ path: join(tempDir(), 'wide.db'), server: server.url, group: 'wide', assets, logger: quiet })).rejects.toThrow(
      expect.objectContaining({ code: 'invalid_option', message: expect.stringContaining('assets: must list at most 100 assets') }),
    );
    // The same name listed twice is one asset.
    const twice = await openConsumer({ path: join(tempDir(), 'twice.db'), server: server.url, group: 'twice', assets: Array.from({ length: 150 }, () => 'orders_ready'), logger: quiet });
    await twice.close();
  });

  it('refuses, with feedback_loop, an emission of the asset and partition it consumed', async () => {
    server = await startServer({ assets: ['orders_ready'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['p1']);
    const consumer = await openConsumer({ path: join(dir, 'loop.db'), server: server.url, group: 'echo', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2 });
    const receipts: Promise<unknown>[] = [];
    await runUntil(
      (signal) =>
        consumer.run(
          (event, ctx) => {
            const emission = ctx.commit((tx) => tx.emit('orders_ready', { partitionKey: event.partitionKey! }));
            receipts.push(emission.receipt().catch((e: unknown) => e));
          },
          { signal },
        ),
      () => receipts.length >= 1,
    );
    const refusal = (await receipts[0]) as { code: string; message: string };
    expect(refusal.code).toBe('rejected');
    expect(refusal.message).toContain('feedback_loop');
    await consumer.close({ timeoutMs: 0 });
    expect((await server.events()).length).toBe(1);
  });

  it('fires a trigger once per partition, when both assets have it', async () => {
    server = await startServer({ assets: ['orders_ready', 'payments_ready'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['d1', 'd2'], 'orders');
    await publish(server.url, dir, 'payments_ready', ['d2', 'd3'], 'payments');
    // A re-run of orders for d2: a new event for a partition that will have fired.
    await publish(server.url, join(dir, 'rerun'), 'payments_ready', ['d2'], 'payments-rerun');
    const consumer = await openConsumer({
      path: join(dir, 'trigger.db'),
      server: server.url,
      group: 'joiner',
      assets: ['orders_ready', 'payments_ready'],
      logger: quiet,
      waitSeconds: 0.2,
    });
    const fired: [string, string[]][] = [];
    consumer.trigger({ when: ['orders_ready', 'payments_ready'] }, (partition, events) => {
      fired.push([partition, events.map((e: StoredEvent) => e.asset)]);
    });
    await runUntil((signal) => consumer.run({ signal }), () => consumer.cursor >= 5);
    expect(fired).toEqual([['d2', ['orders_ready', 'payments_ready']]]);
    await consumer.close();
  });

  it('is fenced by a consumer of the same group that starts after it', async () => {
    server = await startServer({ assets: ['orders_ready'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['a']);
    const old = await openConsumer({ path: join(dir, 'old.db'), server: server.url, group: 'g', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2 });
    const replacement = await openConsumer({ path: join(dir, 'new.db'), server: server.url, group: 'g', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2 });
    expect(replacement.epoch).toBeGreaterThan(old.epoch);
    await publish(server.url, join(dir, 'more'), 'orders_ready', ['b'], 'more');
    await expect(old.run((_event, ctx) => ctx.commit(() => undefined))).rejects.toBeInstanceOf(FencedError);
    await old.close({ timeoutMs: 0 });
    await replacement.close({ timeoutMs: 0 });
  });

  it('refuses a misused transaction with a typed error, and commits nothing of the refused commit', async () => {
    server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['a', 'b']);
    const open = (name: string) =>
      openConsumer({ path: join(dir, `${name}.db`), server: server.url, group: name, assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2, batchSize: 2 });
    const refusal = async (name: string, handler: (events: StoredEvent[], ctx: ConsumeContext) => unknown, committed = 0) => {
      const consumer = await open(name);
      const error = await consumer.run(handler, { batch: true }).catch((e: unknown) => e);
      const cursor = consumer.cursor;
      await consumer.close({ timeoutMs: 0 });
      expect(cursor, `${name}: the cursor committed`).toBe(committed);
      return error as { code: string; field?: string; message: string };
    };
    // A batch of two: which event an emission answers must be said.
    expect(await refusal('no-cause', (_events, ctx) => ctx.commit((tx) => tx.emit('orders_summarised', { partitionKey: 'a' })))).toMatchObject({
      code: 'invalid_option',
      field: 'cause',
      message: 'tx.emit(): this handler got 2 events; say which one the emission responds to with tx.emit(asset, input, { cause: event })',
    });
    const stranger = { eventId: 'not-in-this-batch', cursor: 99 } as StoredEvent;
    expect(await refusal('stranger', (_events, ctx) => ctx.commit((tx) => tx.emit('orders_summarised', {}, { cause: stranger })))).toMatchObject({
      code: 'invalid_option',
      field: 'cause',
      message: 'tx.emit(): cause must be one of the events this handler got; event not-in-this-batch is not',
    });
    let kept: ConsumeTransaction | undefined;
    const leaked = await refusal('leaked', (_events, ctx) => {
      ctx.commit((tx) => {
        kept = tx;
      });
      // The commit has ended: the tx kept from it is of no use any more.
      try {
        kept!.emit('orders_summarised', {});
      } catch (error) {
        expect(() => kept!.db).toThrow(new CommitEndedError('tx.db: this commit has already ended; use tx only inside the commit callback'));
        throw error;
      }
    }, 2);
    expect(leaked).toBeInstanceOf(CommitEndedError);
    expect(leaked.message).toBe('tx.emit: this commit has already ended; use tx only inside the commit callback');
    expect(await refusal('twice', (_events, ctx) => ctx.commit(() => ctx.commit(() => undefined)))).toMatchObject({ code: 'invalid_option', field: 'ctx.commit' });
  });

  it('in a batch, emits in response to whichever event of it is named', async () => {
    server = await startServer({ assets: ['orders_ready', 'orders_summarised'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['a', 'b']);
    const consumer = await openConsumer({ path: join(dir, 'batch.db'), server: server.url, group: 'batcher', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2, batchSize: 2 });
    await runUntil(
      (signal) => consumer.run((events, ctx) => ctx.commit((tx) => tx.emit('orders_summarised', { partitionKey: 'both' }, { cause: events[1] })), { batch: true, signal }),
      () => consumer.cursor >= 2,
    );
    await consumer.close();
    const [source] = (await server.events({ asset: 'orders_ready' })).slice(1);
    expect((await server.events({ asset: 'orders_summarised' })).map((e) => e.causedBy)).toEqual([source!.eventId]);
  });

  it('joins only its own assets, only events with a partition, refreshes when asked, and keys each trigger apart', async () => {
    server = await startServer({ assets: ['orders_ready', 'payments_ready', 'refunds_ready', 'close_ready'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['d1', 'd2'], 'orders');
    // refunds for d2 are consumed but not part of the join; a payment without a partition joins nothing.
    await publish(server.url, dir, 'refunds_ready', ['d2'], 'refunds');
    const box = await openOutbox({ path: join(dir, 'payments.db'), server: server.url, producer: 'payments', run: { workflow: 'wf', runId: 'r1', attempt: 1 }, logger: quiet });
    await box.asset('payments_ready').emit();
    await box.asset('payments_ready').emit({ partitionKey: 'd1' });
    await box.close();
    // A re-run of payments for d1: a newer event of a partition that fired.
    await publish(server.url, join(dir, 'rerun'), 'payments_ready', ['d1'], 'payments-rerun');
    const consumer = await openConsumer({
      path: join(dir, 'join.db'),
      server: server.url,
      group: 'closer',
      assets: ['orders_ready', 'payments_ready', 'refunds_ready'],
      logger: quiet,
      waitSeconds: 0.2,
    });
    const firings: string[] = [];
    const spec = { when: ['orders_ready', 'payments_ready'] };
    expect(() => consumer.trigger({ when: [] }, () => undefined)).toThrow(/^consumer\.trigger: when: must list at least one asset/);
    let kept: ConsumeTransaction | undefined;
    consumer.trigger(spec, (partition, _events, ctx) => {
      kept = ctx.tx;
      firings.push(`plain ${partition} ${ctx.firing} ${ctx.refresh}`);
      ctx.tx.emit('close_ready', { partitionKey: partition });
    });
    expect(() => consumer.trigger(spec, () => undefined)).toThrow(
      new OptionsError('name', 'name: a trigger named "orders_ready+payments_ready" is registered already; give each trigger its own name'),
    );
    consumer.trigger({ ...spec, name: 'refreshing', onNewer: 'refresh' }, (partition, events, ctx) => {
      firings.push(`refreshing ${partition} ${ctx.firing} ${ctx.refresh} ${events.map((e) => e.producer).join(',')}`);
      // The same asset and partition as the other trigger, from the same completing event: its own key.
      ctx.tx.emit('close_ready', { partitionKey: partition });
    });
    await runUntil((signal) => consumer.run({ signal }), () => consumer.cursor >= 6);
    await consumer.close();
    // A firing's tx ends with it.
    expect(() => kept!.emit('close_ready', {})).toThrow(CommitEndedError);
    expect(firings).toEqual([
      'plain d1 1 false',
      'refreshing d1 1 false orders,payments',
      'refreshing d1 2 true orders,payments-rerun',
    ]);
    expect((await server.events({ asset: 'close_ready' })).map((e) => e.partitionKey)).toEqual(['d1', 'd1', 'd1']);
  });

  it('refuses an async trigger handler: its firing is not recorded and the event stays unconsumed', async () => {
    server = await startServer({ assets: ['orders_ready'] });
    const dir = tempDir();
    await publish(server.url, dir, 'orders_ready', ['d1']);
    const consumer = await openConsumer({ path: join(dir, 'async.db'), server: server.url, group: 'async', assets: ['orders_ready'], logger: quiet, waitSeconds: 0.2 });
    consumer.trigger({ when: ['orders_ready'] }, (() => Promise.resolve()) as unknown as () => void);
    await expect(consumer.run()).rejects.toBeInstanceOf(AsyncCommitError);
    expect(consumer.cursor).toBe(0);
    await consumer.close({ timeoutMs: 0 });
  });
});
