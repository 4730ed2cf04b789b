import { createConnection, createServer, type Socket } from 'node:net';
import { afterEach } from 'vitest';

export interface NetFront {
  url: string;
  /** Connections accepted so far, cut or passed on. */
  readonly accepted: number;
  close(): Promise<void>;
}

const fronts: NetFront[] = [];

/**
 * A TCP front for an HTTP server that closes the first `cut` connections as soon as it accepts them,
 * before a byte is read, and passes later ones through: a server restarting, or a kept-alive connection
 * closed by the other side just as a client reuses it. Closed when the test ends.
 */
export async function startNetFront(upstream: string, cut: number): Promise<NetFront> {
  const target = new URL(upstream);
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    if (accepted <= cut) {
      socket.destroy();
      return;
    }
    const onward = createConnection({ host: target.hostname, port: Number(target.port) });
    for (const end of [socket, onward]) {
      sockets.add(end);
      end.on('close', () => sockets.delete(end));
      end.on('error', () => socket.destroy());
    }
    onward.on('error', () => onward.destroy());
    socket.pipe(onward).pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const front: NetFront = {
    url: `http://127.0.0.1:${port}`,
    get accepted() {
      return accepted;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  fronts.push(front);
  return front;
}

afterEach(async () => {
  for (const front of fronts.splice(0)) await front.close();
});
