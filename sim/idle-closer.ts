import { connect, createServer, type Socket } from 'node:net';

/**
 * A hop in front of the world's network that closes a client's connection once nothing has passed on it
 * for `idleMs`, as a load balancer does with idle keep-alive connections, and says how many it holds:
 * a process talking through it is left with no socket once it is idle, and only its own reasons to
 * live (`oncebox relay` must have one).
 */
export interface IdleCloser {
  url: string;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Connections open now. */
  open(): number;
  close(): Promise<void>;
}

export async function startIdleCloser(upstream: string, idleMs: number): Promise<IdleCloser> {
  const { hostname, port } = new URL(upstream);
  const clients = new Set<Socket>();
  let accepted = 0;
  const server = createServer((client) => {
    accepted++;
    clients.add(client);
    const up = connect(Number(port), hostname);
    const end = () => {
      clients.delete(client);
      client.destroy();
      up.destroy();
    };
    client.pipe(up).on('error', end).on('close', end);
    up.pipe(client).on('error', end).on('close', end);
    client.setTimeout(idleMs, end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}`,
    get accepted() {
      return accepted;
    },
    open: () => clients.size,
    close: () =>
      new Promise((resolve) => {
        for (const client of clients) client.destroy();
        server.close(() => resolve());
      }),
  };
}
