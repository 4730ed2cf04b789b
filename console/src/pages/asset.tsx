import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { Link } from 'wouter-preact';
import type { AssetSummary, PartitionPage, PartitionState, PartitionSummary } from '../../../src/protocol/catalog.js';
import { ApiError, getJson, streamPath, withQuery } from '../api.js';
import { Badge, LoadState } from '../components/status.js';
import { ago, count, streamName } from '../format.js';
import { useLive } from '../live.js';
import { useSession } from '../session.js';
import { useVirtualRows } from '../use-virtual-rows.js';
import { Text } from '../components/text.js';

/**
 * Partitions per request: a screenful of rows needs one page, a scroll to the end a few. The most the
 * server answers to a page (CATALOG_PAGE_ROWS; a constant of its own, to keep the protocol's schemas out
 * of the console's bundle).
 */
const PAGE = 200;
const ROW_HEIGHT = 36;

interface Loaded {
  /** The `after` this page was asked with (undefined for the first). */
  after: string | undefined;
  items: PartitionSummary[];
  next: string | null;
}

const STATE_HELP: Record<PartitionState, string> = {
  published: 'one event, delivered once',
  deduplicated: 'one event; retried deliveries of it were absorbed as duplicates',
  republished: 'more than one event: a re-run emitted it again under new keys',
};

/**
 * One asset: its counts, then its partitions, one row each (partition × state), each linking to its
 * newest event, the run and attempt that produced it, and the duplicates absorbed. The rows are
 * virtualised and fetched a page at a time as the reader scrolls, so ten thousand partitions stay quick.
 */
export function AssetPage({ name }: { name: string }) {
  const { token, signOut } = useSession();
  const { tick } = useLive();
  const [asset, setAsset] = useState<AssetSummary | undefined>();
  const [pages, setPages] = useState<Loaded[]>([]);
  const [error, setError] = useState<ApiError | undefined>();
  const fetching = useRef(false);
  const scroller = useRef<HTMLDivElement>(null);

  const fetchPage = useCallback(
    async (after: string | undefined): Promise<Loaded | undefined> => {
      try {
        const page = await getJson<PartitionPage>(withQuery(`v1/catalog/assets/${encodeURIComponent(name)}/partitions`, { after, limit: PAGE }), token!);
        setAsset(page.asset);
        setError(undefined);
        return { after, items: page.items, next: page.next };
      } catch (caught) {
        if (caught instanceof ApiError && caught.refusedToken) signOut(caught.message);
        else setError(caught as ApiError);
        return undefined;
      }
    },
    [name, token, signOut],
  );

  // A new asset starts over.
  useEffect(() => {
    setPages([]);
    setAsset(undefined);
    fetching.current = true;
    void fetchPage(undefined).then((page) => {
      fetching.current = false;
      if (page) setPages([page]);
    });
  }, [fetchPage]);

  const loaded = pages.flatMap((page) => page.items);
  const more = pages.at(-1)?.next ?? null;
  const total = Math.max(loaded.length, more === null ? loaded.length : (asset?.partitions ?? loaded.length));
  const rows = useVirtualRows(total, () => scroller.current, ROW_HEIGHT);
  const visible = rows.getVirtualItems();
  const lastVisible = visible.at(-1)?.index ?? 0;

  // Fetch the next page once the reader comes near the end of what is loaded.
  useEffect(() => {
    if (fetching.current || more === null || lastVisible < loaded.length - 50) return;
    fetching.current = true;
    void fetchPage(more).then((page) => {
      fetching.current = false;
      if (page) setPages((now) => (now.at(-1)?.next === page.after ? [...now, page] : now));
    });
  }, [lastVisible, loaded.length, more, fetchPage]);

  // Live: the pages in view are fetched again; a page whose end moved drops the pages after it.
  const firstTick = useRef(tick);
  useEffect(() => {
    if (tick === firstTick.current || pages.length === 0 || fetching.current) return;
    const first = Math.floor((visible[0]?.index ?? 0) / PAGE);
    const last = Math.min(pages.length - 1, Math.floor(lastVisible / PAGE));
    fetching.current = true;
    void (async () => {
      let next = pages;
      for (let index = first; index <= last; index++) {
        const page = await fetchPage(next[index]!.after);
        if (!page) break;
        next = page.next === next[index]!.next ? next.map((old, at) => (at === index ? page : old)) : [...next.slice(0, index), page];
      }
      fetching.current = false;
      setPages(next);
    })();
    // Only a tick starts this; the rest is read as it is then.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [tick]);

  return (
    <>
      <h1>
        Asset{' '}
        <span class="name">
          <Text value={name} />
        </span>
      </h1>
      <LoadState loading={asset === undefined && error === undefined} error={error} />
      {asset ? (
        <dl class="facts">
          <div>
            <dt>Events</dt>
            <dd data-testid="asset-events">{count(asset.events)}</dd>
          </div>
          <div>
            <dt>Partitions</dt>
            <dd data-testid="asset-partitions">{count(asset.partitions)}</dd>
          </div>
          <div>
            <dt>Duplicates absorbed</dt>
            <dd data-testid="asset-duplicates">{count(asset.duplicates)}</dd>
          </div>
          <div>
            <dt>Last event</dt>
            <dd>{asset.lastEvent ? ago(asset.lastEvent.timestamp) : 'none yet'}</dd>
          </div>
        </dl>
      ) : null}
      <ul class="legend" aria-label="Partition states">
        {(Object.keys(STATE_HELP) as PartitionState[]).map((state) => (
          <li key={state}>
            <Badge kind={state}>{state}</Badge> {STATE_HELP[state]}
          </li>
        ))}
      </ul>
      {asset && total === 0 ? <p class="muted">No partitioned events yet.</p> : null}
      <div class="grid-head" role="presentation">
        <span>Partition</span>
        <span>State</span>
        <span class="num">Events</span>
        <span class="num">Duplicates</span>
        <span>Event</span>
        <span>Run · attempt</span>
      </div>
      <div
        ref={scroller}
        class="grid"
        tabIndex={0}
        role="table"
        aria-label={`Partitions of ${name}`}
        aria-rowcount={total}
        data-testid="partitions"
      >
        <div style={{ height: `${rows.getTotalSize()}px`, position: 'relative' }} role="rowgroup">
          {visible.map((row) => {
            const partition = loaded[row.index];
            return (
              <div
                key={row.key}
                role="row"
                aria-rowindex={row.index + 1}
                class="grid-row"
                data-partition={partition?.partitionKey}
                style={{ position: 'absolute', top: 0, left: 0, right: 0, height: `${row.size}px`, transform: `translateY(${row.start}px)` }}
              >
                {partition ? <PartitionRow asset={name} partition={partition} /> : <span role="cell" class="muted">loading…</span>}
              </div>
            );
          })}
        </div>
      </div>
    </>
  );
}

function PartitionRow({ asset, partition }: { asset: string; partition: PartitionSummary }) {
  const { event } = partition;
  return (
    <>
      <span role="cell" class="key">
        <Text value={partition.partitionKey} />
      </span>
      <span role="cell">
        <Badge kind={partition.state}>{partition.state}</Badge>
      </span>
      <span role="cell" class="num">
        {partition.events}
      </span>
      <span role="cell" class="num">
        {partition.duplicates}
      </span>
      <span role="cell">
        <Link href={`/events/${event.cursor}?asset=${encodeURIComponent(asset)}`} title={event.eventId}>
          event {event.cursor}
        </Link>{' '}
        <time dateTime={event.timestamp} class="muted">
          {ago(event.timestamp)}
        </time>
      </span>
      <span role="cell">
        <Link href={streamPath(event)}>
          <Text value={streamName(event)} /> · {event.attempt}
        </Link>
      </span>
    </>
  );
}
