import { useEffect, useState } from 'preact/hooks';
import type { BaseLocationHook } from 'wouter-preact';

/**
 * Routes and their query both live in the URL's fragment (`#/streams/p/r?task=t`): the server serves
 * one page under any path a proxy puts it, a link opened in a new tab shows the same view, and the
 * page's real query string is never touched. (wouter's own hash hook keeps the query in the real
 * query string, where it outlives the view that set it.)
 */

function fragment(): [path: string, search: string] {
  const [path = '', search = ''] = location.hash.replace(/^#?\/?/, '').split(/\?(.*)/s);
  return [`/${path}`, search];
}

/**
 * The fragment as the views read it, with one listener for every view: path and query change together,
 * in one render. (With a listener each, a move from one run to another rendered once with the new path
 * and the old query, and its request went out for the new run with the old run's `?task=`.)
 */
let current = fragment();
const readers = new Set<() => void>();
addEventListener('hashchange', () => {
  current = fragment();
  for (const reader of readers) reader();
});

/** The part of the fragment `pick` reads, kept current as the fragment changes. */
function useFragment(pick: (now: [path: string, search: string]) => string): string {
  const [, rendered] = useState(0);
  useEffect(() => {
    const reader = () => rendered((n) => n + 1);
    readers.add(reader);
    // A change between the first render and this subscription is not missed.
    if (current[0] !== fragment()[0] || current[1] !== fragment()[1]) {
      current = fragment();
      reader();
    }
    return () => {
      readers.delete(reader);
    };
  }, []);
  return pick(current);
}

const currentPath = (now: [string, string]) => now[0];
const currentSearch = (now: [string, string]) => now[1];

function navigate(to: string, options: { replace?: boolean } = {}): void {
  const url = new URL(location.href);
  url.hash = to.startsWith('/') ? to : `/${to}`;
  if (url.href === location.href) return;
  if (options.replace) location.replace(url.href);
  else location.assign(url.href);
}

export const useFragmentLocation: BaseLocationHook = () => [useFragment(currentPath), navigate];

export function useFragmentSearch(): string {
  return useFragment(currentSearch);
}

export const fragmentHref = (href: string): string => `#${href}`;
