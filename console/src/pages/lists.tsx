import { useSearch } from 'wouter-preact';
import type { AssetSummary, ConsumerGroup, Page, Rejection, StreamSummary } from '../../../src/protocol/catalog.js';
import { withQuery } from '../api.js';
import { Pager } from '../components/pager.js';
import { LoadState } from '../components/status.js';
import { AssetTable, ConsumerTable, RejectionList, StreamTable } from '../components/tables.js';
import { useApi } from '../use-api.js';
import { Text } from '../components/text.js';

/** The full lists, a page per request; the page's `after` and filters live in the URL, so a view can be shared. */

function useListQuery(...filters: string[]): Record<string, string | undefined> {
  const params = new URLSearchParams(useSearch());
  return Object.fromEntries(['after', ...filters].map((name) => [name, params.get(name) ?? undefined]));
}

export function AssetsPage() {
  const query = useListQuery('prefix');
  const { data, error, loading } = useApi<Page<AssetSummary>>(withQuery('v1/catalog/assets', { ...query, limit: 100 }));
  return (
    <>
      <h1>Assets</h1>
      <LoadState loading={loading} error={error} />
      {data ? (
        <>
          {data.items.length === 0 ? <p class="muted">No assets.</p> : <AssetTable assets={data.items} caption="Assets, by name" />}
          <Pager next={data.next} first={query.after === undefined} />
        </>
      ) : null}
    </>
  );
}

export function StreamsPage() {
  const query = useListQuery('kind', 'outcome', 'producer');
  const { data, error, loading } = useApi<Page<StreamSummary>>(withQuery('v1/catalog/streams', { ...query, limit: 100 }));
  const filtered = [query.kind, query.outcome, query.producer].filter((value) => value !== undefined).join(', ');
  return (
    <>
      <h1>
        Runs
        {filtered === '' ? null : (
          <>
            {' ('}
            <Text value={filtered} />)
          </>
        )}
      </h1>
      <p class="muted">Every stream: a job's run (per task), or a consumer group. Newest delivery first.</p>
      <LoadState loading={loading} error={error} />
      {data ? (
        <>
          {data.items.length === 0 ? <p class="muted">No streams.</p> : <StreamTable streams={data.items} caption="Streams, newest delivery first" />}
          <Pager next={data.next} first={query.after === undefined} />
        </>
      ) : null}
    </>
  );
}

export function ConsumersPage() {
  const query = useListQuery();
  const { data, error, loading } = useApi<Page<ConsumerGroup>>(withQuery('v1/catalog/consumers', { ...query, limit: 100 }));
  return (
    <>
      <h1>Consumer groups</h1>
      <p class="muted">Lag is the number of events of a group's assets after its cursor.</p>
      <LoadState loading={loading} error={error} />
      {data ? (
        <>
          {data.items.length === 0 ? <p class="muted">No consumer group.</p> : <ConsumerTable groups={data.items} caption="Consumer groups, by name" />}
          <Pager next={data.next} first={query.after === undefined} />
        </>
      ) : null}
    </>
  );
}

export function RejectionsPage() {
  const query = useListQuery('code', 'producer');
  const { data, error, loading } = useApi<Page<Rejection>>(withQuery('v1/catalog/rejections', { ...query, limit: 100 }));
  return (
    <>
      <h1>Rejections</h1>
      <p>
        Items the server refused for good, newest first. Each refused row waits, dead, in its job's outbox file, on the machine that holds the
        file (<code>oncebox dead list</code> shows them); each row's fix says what to do about it, and whether it can be sent again.
      </p>
      <LoadState loading={loading} error={error} />
      {data ? (
        <>
          {data.items.length === 0 ? <p class="muted">Nothing refused.</p> : <RejectionList rejections={data.items} />}
          <Pager next={data.next} first={query.after === undefined} />
        </>
      ) : null}
    </>
  );
}
