import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { startServer } from '../support/server.js';

/** Clients that try to hold the server with real sockets on loopback: trickling, idling, piling up. */
const sockets: Socket[] = [];
afterEach(() => {
  for (const socket of sockets.splice(0)) socket.destroy();
});

interface Held {
  socket: Socket;
  /** Everything the server sent, once it closed the connection. */
  closed: Promise<{ text: string }>;
}

async function open(url: string): Promise<Held> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  sockets.push(socket);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let text = '';
  socket.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
  socket.on('error', () => undefined);
  const closed = new Promise<{ text: string }>((resolve) => socket.once('close', () => resolve({ text })));
  return { socket, closed };
}

/** Writes `text` one byte at a time, `everyMs` apart, until the socket closes. */
async function trickle(socket: Socket, text: string, everyMs: number): Promise<void> {
  for (const char of text) {
    if (socket.destroyed) return;
    socket.write(char);
    await sleep(everyMs);
  }
}

const limits = { requestTimeoutMs: 1500, headersTimeoutMs: 800, keepAliveTimeoutMs: 500 };

describe('clients that try to hold the server', () => {
  it('cuts off a body sent one byte at a time when the request timeout runs out, with a 408 problem', async () => {
    const { url } = await startServer(limits);
    const held = await open(url);
    held.socket.write('POST /v1/emissions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n');
    void trickle(held.socket, `{"stream":${'x'.repeat(190)}`, 100);
    // The body would take 19 s to arrive: a 408 says the timeout cut it off, however busy the machine.
    const { text } = await held.closed;
    expect(text).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(text).toContain('Content-Type: application/problem+json; charset=utf-8');
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({ status: 408, code: 'request_timeout' });
  });

  it('cuts off headers sent one byte at a time when the header timeout runs out', async () => {
    const { url } = await startServer(limits);
    const held = await open(url);
    void trickle(held.socket, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ${'y'.repeat(100)}\r\n\r\n`, 50);
    // The headers would take 6 s to arrive (and be answered 200): a 408 says the header timeout cut them off.
    const { text } = await held.closed;
    expect(text).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
  });

  it('answers headers that are too large, and a request that is not HTTP, with problem+json', async () => {
    const { url } = await startServer(limits);
    const huge = await open(url);
    huge.socket.write(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'z'.repeat(20_000)}\r\n\r\n`);
    expect((await huge.closed).text).toMatch(/^HTTP\/1\.1 431 Request Header Fields Too Large\r\nContent-Type: application\/problem\+json/);
    const garbage = await open(url);
    garbage.socket.write('HELLO THERE\r\n\r\n');
    const { text } = await garbage.closed;
    expect(text).toMatch(/^HTTP\/1\.1 400 Bad Request\r\nContent-Type: application\/problem\+json/);
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({ status: 400, code: 'invalid_request' });
  });

  it('closes connections past the cap at once, and goes on serving the others', async () => {
    // Timeouts far beyond the test's: only the cap can close the extra connection while the others live.
    const { url } = await startServer({ ...limits, headersTimeoutMs: 600_000, requestTimeoutMs: 600_000, maxConnections: 4 });
    const held = await Promise.all(Array.from({ length: 4 }, () => open(url)));
    const extra = await open(url);
    await extra.closed;
    // "At once": closed while the connections it found are all still open, not when some timeout ended them.
    expect(held.map((connection) => connection.socket.destroyed)).toEqual([false, false, false, false]);
    // A held connection is served as usual.
    held[0]!.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect((await held[0]!.closed).text).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    // Its place is free again.
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });

  it('keeps a connection that only asks for public routes (a health check) past the time a token would be due', async () => {
    const { url } = await startServer({ token: 'a-job-token-of-this-test', unauthenticatedTimeoutMs: 300 });
    const held = await open(url);
    for (let i = 0; i < 8; i++) {
      const before = held.socket.bytesRead;
      held.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      while (held.socket.bytesRead === before && !held.socket.destroyed) await sleep(10);
      await sleep(100);
    }
    expect(held.socket.destroyed).toBe(false);
  });

  it('serves a publisher beside 600 half-sent requests from one address: that address holds at most its share, each only until it has shown no token for a while', { timeout: 180_000 }, async () => {
    const token = 'a-job-token-of-this-test';
    const { url } = await startServer({ token, headersTimeoutMs: 60_000, requestTimeoutMs: 60_000, unauthenticatedTimeoutMs: 1000 });
    // Headers never finished: no token arrives on any of them.
    const halfSent = await Promise.all(
      Array.from({ length: 600 }, async () => {
        const held = await open(url);
        held.socket.write('POST /v1/emissions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n');
        return held;
      }),
    );
    // Past the address's share, each is answered 503 and closed at once: the address holds at most 128.
    let closedSoFar = 0;
    const closed = halfSent.map((held) => held.closed.then((result) => (closedSoFar++, result)));
    while (600 - closedSoFar > 128) await sleep(20);
    // A job on another address publishes meanwhile, with its token.
    const { hostname, port } = new URL(url);
    const body = JSON.stringify({ stream: { producer: 'p', workflow: 'w', runId: 'r', task: null, attempt: 1 }, items: [{ seq: 1, key: '00000000-0000-4000-8000-00000000cafe', kind: 'event', asset: 'batch_ready', partitionKey: 'x' }] });
    const published = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        { host: hostname, port, localAddress: '127.0.0.2', method: 'POST', path: '/v1/emissions', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` } },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    expect(published).toBe(200);
    // The address's share is closed once it has shown no token for a second (not after the 60 s header timeout).
    // (Each 503 frees a place the next half-sent request takes, until its second is up.)
    const answers = (await Promise.all(closed)).map((result) => result.text.slice(0, 12));
    expect(answers.filter((status) => status !== 'HTTP/1.1 503' && status !== 'HTTP/1.1 408')).toEqual([]);
    expect(answers.filter((status) => status === 'HTTP/1.1 503').length).toBeGreaterThanOrEqual(600 - 2 * 128);
  });
});
