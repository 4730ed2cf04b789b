import { Link, useLocation, useSearch } from 'wouter-preact';

/** The link to a list's next page (its `next` cursor in the page's URL, beside its filters), and back to the first. */
export function Pager({ next, first }: { next: string | null; first: boolean }) {
  const [location] = useLocation();
  const search = useSearch();
  const pageAt = (after: string | null) => {
    const params = new URLSearchParams(search);
    if (after === null) params.delete('after');
    else params.set('after', after);
    const query = params.toString();
    return query === '' ? location : `${location}?${query}`;
  };
  return (
    <nav class="pager" aria-label="Pages">
      {first ? null : <Link href={pageAt(null)}>First page</Link>}
      {next === null ? null : <Link href={pageAt(next)}>Next page</Link>}
    </nav>
  );
}
