import type { ComponentChildren } from 'preact';
import { Link, useLocation } from 'wouter-preact';
import { useLive } from '../live.js';
import { useSession } from '../session.js';

const NAV = [
  ['/', 'Overview'],
  ['/assets', 'Assets'],
  ['/streams', 'Runs'],
  ['/consumers', 'Consumers'],
  ['/rejections', 'Rejections'],
] as const;

/** Every page's frame: a skip link, the navigation, the live state, and the page itself in <main>. */
export function Layout({ children }: { children: ComponentChildren }) {
  const [location] = useLocation();
  const live = useLive();
  const { signOut } = useSession();
  const current = (path: string) => (path === '/' ? location === '/' : location.startsWith(path));
  return (
    <>
      <a class="skip" href="#main" onClick={(event) => {
        event.preventDefault();
        document.getElementById('main')?.focus();
      }}>
        Skip to content
      </a>
      <header class="top">
        <span class="brand">oncebox</span>
        <nav aria-label="Main">
          {NAV.map(([path, label]) => (
            <Link href={path} aria-current={current(path) ? 'page' : undefined}>
              {label}
            </Link>
          ))}
        </nav>
        <span class={`live live-${live.state}`} role="status" aria-live="polite" data-testid="live">
          {live.state === 'live' ? 'live' : live.state === 'connecting' ? 'connecting…' : 'reconnecting…'}
        </span>
        <button type="button" class="link" onClick={() => signOut()}>
          Forget token
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </>
  );
}
