import { join } from 'node:path';
import { afterEach } from 'vitest';
import { openOutbox, type Outbox, type OutboxOptions } from '../../src/outbox/index.js';
import { tempDir } from './temp.js';

const opened: Outbox[] = [];

export const RUN = { workflow: 'orders', runId: '2026-11-30', task: 'ingest', attempt: 1 } as const;

/**
 * An outbox on a temp file of this test's own. With no server given, the relay is 'manual' and points
 * nowhere (and a retry does not try to resume from it), for tests of the producer side alone. Closed
 * after the test.
 */
export async function testOutbox(options: Partial<OutboxOptions> = {}): Promise<Outbox> {
  const box = await openOutbox({
    path: join(tempDir(), 'outbox.db'),
    producer: 'orders-ingest',
    run: RUN,
    ...(options.server === undefined ? { server: 'http://127.0.0.1:9', relay: 'manual' as const, resume: 'never' as const } : {}),
    ...options,
  });
  opened.push(box);
  return box;
}

afterEach(async () => {
  for (const box of opened.splice(0)) await box.close({ timeoutMs: 0 });
});
