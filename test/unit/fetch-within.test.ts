import { describe, expect, it } from 'vitest';
import { runScript } from '../support/child.js';
import { startNetFront } from '../support/net-front.js';

describe('a request with a deadline (fetchWithin)', () => {
  it('settles, and holds its process until it does, when the server closes the connection before answering a GET', async () => {
    // Upstream never reached: every connection is closed at once. Node 20's fetch then waits with no
    // live handle, and a process with nothing else to do ends silently unless the deadline holds it.
    const front = await startNetFront('http://127.0.0.1:9', Number.POSITIVE_INFINITY);
    const result = await runScript('test/support/fetch-once.ts', [front.url, '500']);
    expect(front.accepted).toBeGreaterThan(0);
    expect(result.lines).toEqual([{ error: 'TimeoutError' }]);
    expect(result.code).toBe(0);
  });
});
