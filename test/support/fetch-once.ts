import { fetchWithin } from '../../src/client/fetch-within.js';

/*
 * One GET with fetchWithin in a process of its own, where nothing else holds the event loop: prints how
 * it ended, as one JSON line. A request that leaves the loop empty prints nothing (and exits 0).
 */
const [url, timeoutMs] = process.argv.slice(2);
try {
  const { response } = await fetchWithin(url!, { method: 'GET' }, Number(timeoutMs));
  console.log(JSON.stringify({ status: response.status }));
} catch (error) {
  console.log(JSON.stringify({ error: (error as Error).name }));
}
