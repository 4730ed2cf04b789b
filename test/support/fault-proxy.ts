import { afterEach } from 'vitest';
import { startFaultProxy as start, type FaultProxy, type FaultProxyOptions } from '../../src/testing/fault-proxy.js';

export type { Fault, FaultProxy, FaultProxyOptions } from '../../src/testing/fault-proxy.js';

const proxies: FaultProxy[] = [];

/** A fault proxy (oncebox/testing's, src/testing/fault-proxy.ts) closed when the test ends. */
export async function startFaultProxy(upstream: string, options: FaultProxyOptions = {}): Promise<FaultProxy> {
  const proxy = await start(upstream, options);
  proxies.push(proxy);
  return proxy;
}

afterEach(async () => {
  for (const proxy of proxies.splice(0)) await proxy.close();
});
