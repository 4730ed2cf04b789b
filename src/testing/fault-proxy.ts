import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { RUN_KEYS_HEADER } from '../protocol/run-keys.js';

/**
 * What the proxy does with one request:
 * - forward: pass it on and pass the answer back;
 * - drop-request: cut the connection without passing it on (the server never sees it);
 * - drop-response: pass it on, let the server commit, then cut the connection (a lost acknowledgement);
 * - duplicate: pass it on twice, answer with the second answer (a duplicated delivery);
 * - delay: wait, then forward;
 * - fail-503: answer 503 with Retry-After without passing it on;
 * - hold: cut the connection, keep the request, and pass it on only at `releaseHeld()`: a request stuck
 *   in the network that reaches the server late, after the client resent it and went on (reordering).
 */
export type Fault = 'forward' | 'drop-request' | 'drop-response' | 'duplicate' | 'delay' | 'fail-503' | 'hold';

export interface FaultProxy {
  url: string;
  /** Faults for the next requests, in order; once used up, requests are forwarded. */
  plan(...faults: Fault[]): void;
  /** Drops the faults not used up yet. */
  clearPlan(): void;
  /** Requests seen, requests that reached the server, and the most requests the proxy held at once. */
  readonly stats: { requests: number; forwarded: number; maxConcurrent: number };
  setUpstream(url: string): void;
  /** Passes the held requests on now, in the order they came; their answers go nowhere. */
  releaseHeld(): Promise<void>;
  /** Forgets the held requests: they were lost after all. */
  discardHeld(): void;
  close(): Promise<void>;
}

export interface FaultProxyOptions {
  delayMs?: number | (() => number);
  /** The fault for a request when the plan is used up; 'forward' when absent or when it returns undefined. */
  choose?: (request: { method: string; url: string }) => Fault | undefined;
  /** Told the status of every answer the upstream gave, whether or not the client gets it. */
  onAnswer?: (request: { method: string; url: string }, status: number) => void;
}

/**
 * A small HTTP proxy on loopback between a client and its server, for network faults: the fault layer of
 * the testing kit's server (between a job's relay and the oncebox server), and, in this repository's own
 * tests and demo, between the Airflow forwarder and Airflow.
 * It is long because the proxy's state (the plan, the held requests, the counts, the upstream) is shared
 * by its request handler and by the handle it returns; split, each part would take all of it along.
 */
export async function startFaultProxy(upstream: string, options: FaultProxyOptions = {}): Promise<FaultProxy> {
  let target = upstream;
  const queue: Fault[] = [];
  const held: { url: string; method: string; headers: Record<string, string>; body: Buffer }[] = [];
  const stats = { requests: 0, forwarded: 0, maxConcurrent: 0 };
  let concurrent = 0;
  const delayMs = () => (typeof options.delayMs === 'function' ? options.delayMs() : (options.delayMs ?? 50));

  const headersOf = (req: IncomingMessage) => {
    const headers: Record<string, string> = {};
    // The run-keys header too: a job tested through the proxy has its keys filed as in production.
    for (const name of ['content-type', 'authorization', RUN_KEYS_HEADER]) {
      const value = req.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    return headers;
  };
  const send = (url: string, method: string, headers: Record<string, string>, body: Buffer) =>
    fetch(new URL(url, target), { method, headers, body: method === 'GET' ? undefined : body });
  const forward = async (req: IncomingMessage, body: Buffer) => {
    stats.forwarded++;
    const response = await send(req.url!, req.method!, headersOf(req), body);
    options.onAnswer?.({ method: req.method!, url: req.url! }, response.status);
    return { status: response.status, type: response.headers.get('content-type') ?? 'application/json', body: Buffer.from(await response.arrayBuffer()) };
  };
  const reply = (res: ServerResponse, answer: { status: number; type: string; body: Buffer }) => {
    res.writeHead(answer.status, { 'content-type': answer.type, 'content-length': answer.body.length });
    res.end(answer.body);
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    concurrent++;
    stats.maxConcurrent = Math.max(stats.maxConcurrent, concurrent);
    res.on('close', () => concurrent--);
    req.on('end', async () => {
      stats.requests++;
      const body = Buffer.concat(chunks);
      const fault = queue.shift() ?? options.choose?.({ method: req.method!, url: req.url! }) ?? 'forward';
      try {
        switch (fault) {
          case 'drop-request':
            req.socket.destroy();
            return;
          case 'hold':
            held.push({ url: req.url!, method: req.method!, headers: headersOf(req), body });
            req.socket.destroy();
            return;
          case 'drop-response':
            await forward(req, body);
            req.socket.destroy();
            return;
          case 'duplicate':
            await forward(req, body);
            return reply(res, await forward(req, body));
          case 'delay':
            await sleep(delayMs());
            return reply(res, await forward(req, body));
          case 'fail-503':
            res.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '0' });
            res.end(JSON.stringify({ type: 'about:blank', title: 'Unavailable', status: 503, code: 'unavailable', detail: 'injected' }));
            return;
          case 'forward':
            return reply(res, await forward(req, body));
        }
      } catch {
        // The server is down (a restart in the test): the client sees a reset, as it would in life.
        req.socket.destroy();
      }
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    plan: (...faults) => queue.push(...faults),
    clearPlan: () => {
      queue.length = 0;
    },
    stats,
    setUpstream: (url) => {
      target = url;
    },
    discardHeld: () => {
      held.length = 0;
    },
    releaseHeld: async () => {
      for (const request of held.splice(0)) {
        stats.forwarded++;
        await send(request.url, request.method, request.headers, request.body).then(
          (response) => response.arrayBuffer(),
          () => undefined, // the server is down: the request is lost after all
        );
      }
    },
    close: () => closeServer(server),
  };
}

function closeServer(server: Server): Promise<void> {
  if (!server.listening) return Promise.resolve();
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}
