import { createServer } from 'node:http';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { apiUrl, ServerClient } from '../../src/client/server-client.js';
import { startServer } from '../support/server.js';

/** A port where nothing listens: every request to it is refused. */
const NOBODY = 'http://127.0.0.1:9';

/** A plain HTTP server that answers every request with `status` and `body`. */
async function answering(status: number, body: string): Promise<{ url: string; close: () => void }> {
  const server = createServer((_request, response) => {
    response.writeHead(status, { 'content-type': 'text/plain' });
    response.end(body);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, close: () => server.close() };
}

describe("the producer's server client", () => {
  it('fails over to the next server when one does not answer, and stays there', async () => {
    const { url } = await startServer();
    const client = new ServerClient({ servers: [NOBODY, url], requestTimeoutMs: 2000 });
    const body = JSON.stringify({ stream: { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 }, items: [] });
    await expect(client.sendEmissions(body, 0)).rejects.toMatchObject({ code: 'network', details: { url: `${NOBODY}/v1/emissions` } });
    expect(client.server).toBe(url);
    // The server refuses an empty batch as a whole: a 400 problem, and the client moves on again.
    await expect(client.sendEmissions(body, 0)).rejects.toMatchObject({ code: 'invalid_request', details: { status: 400 } });
    expect(client.server).toBe(NOBODY);
  });

  it('moves on once when several requests in flight to one server fail, not once each', async () => {
    const { url } = await startServer();
    const client = new ServerClient({ servers: [NOBODY, url], requestTimeoutMs: 2000 });
    const body = JSON.stringify({ stream: { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 }, items: [] });
    const failures = await Promise.all([1, 2, 3, 4].map(() => client.sendEmissions(body, 0).catch((error: { code: string }) => error.code)));
    expect(failures).toEqual(['network', 'network', 'network', 'network']);
    expect(client.server).toBe(url);
  });

  it('reads stream state from whichever server answers, with the token, under a base path', async () => {
    const { url } = await startServer({ token: 'secret-token' });
    const withToken = new ServerClient({ servers: [NOBODY, url], token: 'secret-token', requestTimeoutMs: 2000 });
    expect(await withToken.streamState('p', 'never-ran', 'task', 5000)).toBeUndefined();
    const without = new ServerClient({ servers: [url], requestTimeoutMs: 2000 });
    await expect(without.streamState('p', 'r', null, 300)).rejects.toThrow(/401/);
  });

  it('names every server it tried, and what each last answered, when none gave the stream state', async () => {
    const broken = await answering(503, 'down for maintenance');
    try {
      const client = new ServerClient({ servers: [NOBODY, broken.url], requestTimeoutMs: 1000 });
      const failure = await client.streamState('p', 'r', 't', 400).catch((error: Error) => error);
      expect(failure).toMatchObject({ code: 'unreachable' });
      expect((failure as Error).message).toContain(`${NOBODY}/v1/streams/p/r?task=t: could not reach ${NOBODY}/v1/streams/p/r?task=t`);
      expect((failure as Error).message).toContain(`${broken.url}/v1/streams/p/r?task=t: ${broken.url}/v1/streams/p/r?task=t answered 503: down for maintenance`);
    } finally {
      broken.close();
    }
  });

  it('refuses to be made without a server, naming the option', () => {
    expect(() => new ServerClient({ servers: [], requestTimeoutMs: 1000 })).toThrow(expect.objectContaining({ code: 'invalid_option', field: 'server' }));
  });

  it('keeps a path in the server URL as a base path', () => {
    expect(apiUrl('http://h:1', 'v1/emissions').toString()).toBe('http://h:1/v1/emissions');
    expect(apiUrl('http://h:1/', 'v1/emissions').toString()).toBe('http://h:1/v1/emissions');
    expect(apiUrl('https://h/oncebox', 'v1/emissions').toString()).toBe('https://h/oncebox/v1/emissions');
    expect(apiUrl('https://h/a/b/', 'v1/streams/p/r').toString()).toBe('https://h/a/b/v1/streams/p/r');
  });
});
