import { createServer as createHttpServer, STATUS_CODES, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ProblemCode } from '../protocol/errors.js';
import { echo } from '../protocol/text.js';
import { PROBLEM_CONTENT_TYPE } from '../protocol/wire.js';
import { problem } from './problem.js';

/** What one client may hold of the server: time to send a request, idle time, and its share of sockets. */
export interface ConnectionLimits {
  requestTimeoutMs: number;
  headersTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnections: number;
  /** Connections one source address may hold at once; 0 for no cap (behind a proxy that connects from one address). */
  maxConnectionsPerAddress: number;
  /** How long a connection may stay open before one of its requests presents a live token. */
  unauthenticatedTimeoutMs: number;
}

/** The connections one of whose requests presented a live token (or needed none). */
const authenticated = new WeakSet<Socket>();

/**
 * @internal Notes that a request on this socket presented a live token: the connection is no longer
 * held to the unauthenticated time limit.
 */
export function markAuthenticated(socket: Socket): void {
  authenticated.add(socket);
}

/** Node's own refusals, by the code of the parse or timeout error behind them. */
const CLIENT_ERRORS: Record<string, [number, string, string]> = {
  HPE_HEADER_OVERFLOW: [431, ProblemCode.InvalidRequest, 'the request headers are too large; send fewer or shorter headers'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, ProblemCode.RequestTimeout, 'the request was not received in time; send it whole, without pauses'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, ProblemCode.BodyTooLarge, 'the chunk extensions are too large'],
};

/** @internal Answers a request Node refused before any route saw it, as problem+json. */
export function answerClientError(error: Error & { code?: string }, socket: Socket): void {
  const [status, code, detail] = CLIENT_ERRORS[error.code ?? ''] ?? [400, ProblemCode.InvalidRequest, 'the request is not valid HTTP/1.1'];
  answerOnSocket(socket, status, code, detail);
}

/** Writes a problem+json answer straight to the socket, then closes it: for requests no route sees. */
function answerOnSocket(socket: Socket | Duplex, status: number, code: string, detail: string): void {
  // Only when nothing was written yet: a half-written answer must not get a second one.
  if (socket.writable && (!('bytesWritten' in socket) || socket.bytesWritten === 0)) {
    const body = JSON.stringify(problem(status, code, detail));
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/**
 * The HTTP server with the connection limits applied. Node checks the request and header timeouts only
 * every `connectionsCheckingInterval` (30 s by default), so it is set to a fraction of them: a client
 * that trickles bytes is cut off close to its deadline.
 */
export function limitedServer(handler: RequestListener, limits: ConnectionLimits): Server {
  const server = createHttpServer(
    {
      requestTimeout: limits.requestTimeoutMs,
      headersTimeout: limits.headersTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
    },
    handler,
  );
  server.maxConnections = limits.maxConnections;
  guardConnections(server, limits);
  // Node hands these to listeners of their own, never to the routes; unheard, CONNECT would be a socket
  // closed without an answer, and a strange Expect a 417 without a body.
  server.on('connect', (request: IncomingMessage, socket: Duplex) =>
    answerOnSocket(socket, 405, ProblemCode.MethodNotAllowed, 'CONNECT is not a method of this server: it is no proxy'),
  );
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
    const body = JSON.stringify(problem(417, ProblemCode.ExpectationFailed, `expect: ${echo(String(request.headers.expect))} is not met here; send no Expect header, or 100-continue`));
    response.writeHead(417, { 'content-type': `${PROBLEM_CONTENT_TYPE}; charset=utf-8`, 'content-length': Buffer.byteLength(body), connection: 'close' });
    response.end(body);
  });
  return server;
}

/**
 * Keeps one source from holding the server's connections: past `maxConnectionsPerAddress` of its own, a
 * connection is answered 503 and closed at once; and a connection none of whose requests has presented a
 * live token within `unauthenticatedTimeoutMs` (a request sent half, headers or body trickled, a socket
 * opened and left) is closed then. A publisher's connection presents its token with its first request,
 * so half-sent requests without one, however many, leave the others' connections served.
 */
function guardConnections(server: Server, limits: ConnectionLimits): void {
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const held = (open.get(address) ?? 0) + 1;
    open.set(address, held);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left <= 0) open.delete(address);
      else open.set(address, left);
    });
    if (limits.maxConnectionsPerAddress > 0 && held > limits.maxConnectionsPerAddress) {
      answerOnSocket(socket, 503, ProblemCode.Overloaded, `this address holds ${limits.maxConnectionsPerAddress} connections to the server already; reuse them (keep-alive) or close some`);
      return;
    }
    const timer = setTimeout(() => {
      if (!authenticated.has(socket)) answerOnSocket(socket, 408, ProblemCode.RequestTimeout, `no request on this connection presented a live token within ${limits.unauthenticatedTimeoutMs} ms`);
    }, limits.unauthenticatedTimeoutMs);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  });
}
