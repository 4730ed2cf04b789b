import { createConnection } from 'node:net';

export const REDIS_URL = new URL(process.env.ONCEBOX_TEST_REDIS ?? 'redis://127.0.0.1:6379');

/** Whether a Redis answers PING at REDIS_URL; the message says why not. */
async function reachable(): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: REDIS_URL.hostname, port: Number(REDIS_URL.port || 6379) });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve('no answer in 3 s');
    }, 3000);
    socket.once('error', (error) => {
      clearTimeout(timer);
      resolve(error.message);
    });
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(data.toString().startsWith('+PONG') ? undefined : `unexpected answer ${data.toString().trim()}`);
    });
  });
}

const problem = await reachable();
if (problem !== undefined && process.env.CI === 'true') {
  throw new Error(`Redis is required under CI=true, but ${REDIS_URL.href} does not answer: ${problem}`);
}
if (problem !== undefined) console.warn(`Redis tests skipped: no Redis at ${REDIS_URL.href} (${problem}); set ONCEBOX_TEST_REDIS`);

/** Whether the Redis tests run here; outside CI they skip, and say why, when no Redis answers. */
export const redisAvailable = problem === undefined;
export const redisSkipReason = problem === undefined ? '' : ` (skipped: no Redis at ${REDIS_URL.href})`;
export const redisConnection = { host: REDIS_URL.hostname, port: Number(REDIS_URL.port || 6379) };
