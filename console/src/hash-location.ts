import { useEffect, useState } from 'preact/hooks';
import type { BaseLocationHook } from 'wouter-preact';

/**
 * Routes and their query both live in the URL's fragment (`#/streams/p/r?task=t`): the server serves
 * one page under any path a proxy puts it, a link opened in a new tab shows the same view, and the
 * page's real query string is never touched. (wouter's own hash hook keeps the query in the real
 * query string, where it outlives the view that set it.)
 */

/** The part of the fragment `pick` reads, kept current as the fragment changes. */
function useFragment(pick: () => string): string {
  const [value, setValue] = useState(pick);
  useEffect(() => {
    const onChange = () => setValue(pick());
    addEventListener('hashchange', onChange);
    onChange();
    return () => removeEventListener('hashchange', onChange);
  }, [pick]);
  return value;
}

function fragment(): [path: string, search: string] {
  const [path = '', search = ''] = location.hash.replace(/^#?\/?/, '').split(/\?(.*)/s);
  return [`/${path}`, search];
}

const currentPath = () => fragment()[0];
const currentSearch = () => fragment()[1];

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
