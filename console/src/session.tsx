import { createContext, type ComponentChildren } from 'preact';
import { useCallback, useContext, useState } from 'preact/hooks';

/**
 * The read token, entered once and kept in this tab's session storage: gone when the tab closes, never
 * written to a URL, a cookie or local storage.
 */
const KEY = 'oncebox.console.token';

interface Session {
  token: string | null;
  /** Why the last token was dropped (the server refused it), for the form. */
  refused: string | null;
  signIn(token: string): void;
  signOut(refused?: string): void;
}

const SessionContext = createContext<Session | null>(null);

export function SessionProvider({ children }: { children: ComponentChildren }) {
  const [token, setToken] = useState<string | null>(() => sessionStorage.getItem(KEY));
  const [refused, setRefused] = useState<string | null>(null);
  const signIn = useCallback((next: string) => {
    sessionStorage.setItem(KEY, next);
    setRefused(null);
    setToken(next);
  }, []);
  const signOut = useCallback((why?: string) => {
    sessionStorage.removeItem(KEY);
    setRefused(why ?? null);
    setToken(null);
  }, []);
  return <SessionContext.Provider value={{ token, refused, signIn, signOut }}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error('useSession outside SessionProvider');
  return session;
}
