import { describe, expect, it } from 'vitest';
import { apiUrl, HttpTransport } from '../../src/outbox/transport.js';
import { startServer } from '../support/server.js';

describe('the relay transport', () => {
  it('fails over to the next server when one does not answer, and stays there', async () => {
    const { url } = await startServer();
    const transport = new HttpTransport({ servers: ['http://127.0.0.1:9', url], requestTimeoutMs: 2000 });
    const body = JSON.stringify({ stream: { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 }, items: [] });
    await expect(transport.send(body, 0)).rejects.toMatchObject({ code: 'network' });
    expect(transport.server).toBe(url);
    // The server refuses an empty batch as a whole: a 400 problem, and the transport moves on again.
    await expect(transport.send(body, 0)).rejects.toMatchObject({ code: 'invalid_request', details: { status: 400 } });
    expect(transport.server).toBe('http://127.0.0.1:9');
  });

  it('keeps a path in the server URL as a base path', () => {
    expect(apiUrl('http://h:1', 'v1/emissions').toString()).toBe('http://h:1/v1/emissions');
    expect(apiUrl('http://h:1/', 'v1/emissions').toString()).toBe('http://h:1/v1/emissions');
    expect(apiUrl('https://h/oncebox', 'v1/emissions').toString()).toBe('https://h/oncebox/v1/emissions');
    expect(apiUrl('https://h/a/b/', 'v1/streams/p/r').toString()).toBe('https://h/a/b/v1/streams/p/r');
  });
});
