import { createContext, type ComponentChildren } from 'preact';
import { useContext, useEffect, useState } from 'preact/hooks';
import type { Overview } from '../../src/protocol/catalog.js';
import type { EventPage } from '../../src/protocol/wire.js';
import { ApiError, getJson, withQuery } from './api.js';
import { useSession } from './session.js';

/** Seconds one long-poll lets the server hold its answer. */
const WAIT_S = 25;
/** Checkpoint updates and cursor mirrors store no event: views look again this often anyway. */
const REFRESH_MS = 15_000;
const RETRY_MS = 5_000;

export interface Live {
  /** Goes up whenever something may have changed: views fetch again when it does. */
  tick: number;
  /** The newest event seen, by cursor. */
  newest: number;
  state: 'connecting' | 'live' | 'retrying';
}

const LiveContext = createContext<Live>({ tick: 0, newest: 0, state: 'connecting' });

/**
 * Live updates through the server's own long-poll (GET /v1/events?wait=): each new event moves `tick`,
 * without a reload, and a slower timer covers what stores no event.
 */
export function LiveProvider({ children }: { children: ComponentChildren }) {
  const { token, signOut } = useSession();
  const [live, setLive] = useState<Live>({ tick: 0, newest: 0, state: 'connecting' });
  useEffect(() => {
    if (token === null) return;
    const stop = new AbortController();
    const bump = (changes: Partial<Live>) => setLive((now) => ({ ...now, ...changes, tick: now.tick + 1 }));
    const timer = setInterval(() => bump({}), REFRESH_MS);
    void (async () => {
      let after: number | undefined;
      while (!stop.signal.aborted) {
        try {
          if (after === undefined) {
            after = (await getJson<Overview>('v1/catalog', token, stop.signal)).newestCursor;
            setLive((now) => ({ ...now, newest: after!, state: 'live' }));
          }
          const page = await getJson<EventPage>(withQuery('v1/events', { after, wait: WAIT_S, limit: 1000 }), token, stop.signal);
          if (page.events.length > 0) {
            after = page.next;
            bump({ newest: after, state: 'live' });
          } else setLive((now) => (now.state === 'live' ? now : { ...now, state: 'live' }));
        } catch (error) {
          if (stop.signal.aborted) return;
          // What every view needs: a token that may not read it is of no use in the console.
          if (error instanceof ApiError && (error.refusedToken || error.forbidden)) return signOut(error.message);
          setLive((now) => ({ ...now, state: 'retrying' }));
          await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
        }
      }
    })();
    return () => {
      stop.abort();
      clearInterval(timer);
    };
  }, [token, signOut]);
  return <LiveContext.Provider value={live}>{children}</LiveContext.Provider>;
}

export function useLive(): Live {
  return useContext(LiveContext);
}
