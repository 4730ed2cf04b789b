/**
 * A neighbour on another address tries to hold the server with connections: a health check kept alive,
 * and many requests whose headers never end (no token on any). The server must close those past the
 * address's share at once, close the rest once they have shown no token for a while (long before the
 * header timeout), keep the health check's connection, and serve the tenants meanwhile (G17).
 */
import { connect, type Socket } from 'node:net';
import { expect } from './violation.js';
import { UNAUTHENTICATED_MS, type World } from './world.js';

/** The neighbour's address: another loopback address than every client of the simulation. */
const NEIGHBOUR = '127.0.0.2';
/** Connections one address may hold (the server's default), and how many the neighbour opens beside its health check. */
const SHARE = 128;
const HALF_SENT = SHARE + 24;
/** How long the neighbour's connections may take to be closed: the header timeout is far past it, the token's due time far before. */
const CLOSED_WITHIN_MS = 60_000;

interface Held {
  socket: Socket;
  /** Everything the server sent, once it closed the connection. */
  closed: Promise<string>;
  isClosed: () => boolean;
}

async function open(world: World): Promise<Held> {
  const { hostname, port } = new URL(world.url);
  const socket = connect({ host: hostname, port: Number(port), localAddress: NEIGHBOUR });
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let text = '';
  let closed = false;
  socket.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
  socket.on('error', () => undefined);
  return { socket, closed: new Promise((resolve) => socket.once('close', () => ((closed = true), resolve(text)))), isClosed: () => closed };
}

/** Sends a health check on a kept-alive connection; resolves with the status line, or what went wrong. */
function healthCheck(held: Held): Promise<string> {
  return new Promise((resolve) => {
    const onData = (chunk: string) => {
      if (chunk.startsWith('HTTP/1.1 ')) done(chunk.slice(0, 12));
    };
    const onClose = () => done('closed by the server');
    const done = (answer: string) => {
      held.socket.off('data', onData).off('close', onClose);
      resolve(answer);
    };
    held.socket.on('data', onData).once('close', onClose);
    if (held.isClosed()) return done('closed by the server');
    held.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  });
}

/**
 * The neighbour's monitor checks health on a kept-alive connection while it opens its half-sent
 * requests; a tenant's job and reader work meanwhile (`serveTenants`, from the simulation's own
 * address). Every half-sent connection is closed in time, with a 503 (past its share) or a 408 (no
 * token shown); every health check is answered.
 */
export async function holdConnections(world: World, serveTenants: () => Promise<void>): Promise<void> {
  const health = await open(world);
  // A monitor's health checks on one kept-alive connection, every few hundred ms throughout: each must be answered.
  const checks: string[] = [];
  let monitoring = true;
  const monitor = (async () => {
    while (monitoring) {
      checks.push(await healthCheck(health));
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  })();
  const opened = await Promise.all(Array.from({ length: HALF_SENT }, () => open(world).catch(() => undefined)));
  // A connection refused outright is one the server did not take: as good as closed at once.
  const halfSent = opened.filter((held): held is Held => held !== undefined);
  try {
    for (const held of halfSent) held.socket.write('POST /v1/emissions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n');
    await serveTenants();
    const answers = await Promise.race([
      Promise.all(halfSent.map((held) => held.closed)),
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), CLOSED_WITHIN_MS).unref()),
    ]);
    expect('G17', answers !== undefined, () => `${halfSent.filter((held) => !held.isClosed()).length} connections from ${NEIGHBOUR} that never showed a token were still open ${CLOSED_WITHIN_MS / 1000} s later (due after ${UNAUTHENTICATED_MS} ms)`);
    const statuses = answers!.map((text) => text.slice(0, 12));
    const odd = statuses.filter((status) => status !== 'HTTP/1.1 503' && status !== 'HTTP/1.1 408');
    expect('G17', odd.length === 0, () => `connections from ${NEIGHBOUR} closed with ${JSON.stringify(odd.slice(0, 3))}, want a 503 past its share or a 408 for showing no token`);
    expect('G17', opened.length > halfSent.length || statuses.includes('HTTP/1.1 503'), () => `${NEIGHBOUR} held ${HALF_SENT + 1} connections at once, none refused for its share of ${SHARE}`);
    // Past the time a token would have been due: the health check's connection is kept, and served.
    monitoring = false;
    await monitor;
    checks.push(await healthCheck(health));
    const unanswered = checks.filter((check) => check !== 'HTTP/1.1 200');
    expect('G17', unanswered.length === 0, () => `a monitor's health checks from ${NEIGHBOUR} on one kept-alive connection: ${checks.length - unanswered.length} answered, then ${unanswered[0]}`);
    world.happened('a neighbour held connections without a token');
  } finally {
    monitoring = false;
    for (const held of [health, ...halfSent]) held.socket.destroy();
  }
}
