import { useEffect, useState } from 'preact/hooks';
import { ApiError, getJson } from './api.js';
import { useLive } from './live.js';
import { useSession } from './session.js';

export interface Loaded<T> {
  data: T | undefined;
  error: ApiError | undefined;
  /** True only until the first answer: later refreshes keep showing what is there. */
  loading: boolean;
}

/**
 * One list request per view: `route` fetched when the view opens, and again whenever the live updates
 * say something changed. A refused token signs the user out, with the server's reason.
 */
export function useApi<T>(route: string | null): Loaded<T> {
  const { token, signOut } = useSession();
  const { tick } = useLive();
  // What was answered, and for which route: another route is another view, and what the last one
  // showed must not stand for it, not even for the render before its request goes out.
  const [state, setState] = useState<{ route: string | null; data?: T; error?: ApiError }>({ route: null });
  useEffect(() => {
    if (route === null || token === null) return;
    const stop = new AbortController();
    getJson<T>(route, token, stop.signal).then(
      (data) => setState({ route, data }),
      (error: unknown) => {
        if (stop.signal.aborted) return;
        if (error instanceof ApiError && error.refusedToken) return signOut(error.message);
        // A refresh that failed keeps what the view showed, with the error beside it.
        setState((now) => ({ ...(now.route === route ? now : { route }), error: error as ApiError }));
      },
    );
    return () => stop.abort();
  }, [route, token, tick, signOut]);
  const current = state.route === route && route !== null;
  return {
    data: current ? state.data : undefined,
    error: current ? state.error : undefined,
    loading: route !== null && (!current || (state.data === undefined && state.error === undefined)),
  };
}
