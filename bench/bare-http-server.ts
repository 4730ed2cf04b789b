/**
 * The least an HTTP round trip on loopback can cost here: a node:http server in its own process that
 * reads the request body and answers a small JSON, nothing else. Part of the latency floor.
 *
 * tsx bench/bare-http-server.ts
 */
import http from 'node:http';

const server = http.createServer((request, response) => {
  request.resume();
  request.on('end', () => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end('{"results":[]}');
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('not listening on TCP');
  console.log(JSON.stringify({ url: `http://127.0.0.1:${address.port}` }));
});
process.once('SIGTERM', () => server.close(() => process.exit(0)));
