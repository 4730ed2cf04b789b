import { Link } from 'wouter-preact';
import type { Overview } from '../../../src/protocol/catalog.js';
import { AssetTable, ConsumerTable, RejectionList, StreamTable } from '../components/tables.js';
import { LoadState } from '../components/status.js';
import { count } from '../format.js';
import { useApi } from '../use-api.js';

/** A stale time as the server's flag gives it: whole hours, or minutes below one. */
function hours(ms: number): string {
  return ms >= 3600_000 ? `${Math.round((ms / 3600_000) * 10) / 10} hours` : `${Math.round(ms / 60_000)} minutes`;
}

/** The first page: assets, runs in progress, consumer lag and the refusals of the last day, from one request. */
export function OverviewPage() {
  const { data, error, loading } = useApi<Overview>('v1/catalog');
  return (
    <>
      <h1>Overview</h1>
      <LoadState loading={loading} error={error} />
      {data ? (
        <>
          <ul class="tiles" aria-label="Totals">
            <li>
              <Link href="/assets">
                <strong data-testid="tile-assets">{count(data.assets.items.length)}{data.assets.next === null ? '' : '+'}</strong> assets
              </Link>
            </li>
            <li>
              <Link href="/streams?kind=run&outcome=running">
                <strong data-testid="tile-running">{count(data.running.items.length)}{data.running.next === null ? '' : '+'}</strong> runs in progress
              </Link>
            </li>
            {data.stale.items.length > 0 ? (
              <li>
                <Link href="/streams?kind=run&outcome=stale">
                  <strong data-testid="tile-stale">{count(data.stale.items.length)}{data.stale.next === null ? '' : '+'}</strong> stale runs
                </Link>
              </li>
            ) : null}
            <li>
              <Link href="/consumers">
                <strong data-testid="tile-lagging">{count(data.consumers.items.filter((group) => (group.lag ?? 0) > 0).length)}</strong> consumer groups behind
              </Link>
            </li>
            <li>
              <Link href="/rejections">
                <strong data-testid="tile-rejections">{count(data.rejections.lastDay)}</strong> rejections in the last day
              </Link>
            </li>
          </ul>
          <section aria-labelledby="assets-heading">
            <h2 id="assets-heading">Assets</h2>
            {data.assets.items.length === 0 ? <p class="muted">No assets yet.</p> : <AssetTable assets={data.assets.items} caption="Assets, by name" />}
          </section>
          <section aria-labelledby="running-heading">
            <h2 id="running-heading">Runs in progress</h2>
            {data.running.items.length === 0 ? <p class="muted">No run in progress.</p> : <StreamTable streams={data.running.items} caption="Runs in progress, newest delivery first" />}
          </section>
          {data.stale.items.length > 0 ? (
            <section aria-labelledby="stale-heading">
              <h2 id="stale-heading">Stale runs</h2>
              <p class="muted">No end and no request for {hours(data.staleRunAfterMs)}: the job died unheard, or never calls complete() (docs/runbook.md).</p>
              <StreamTable streams={data.stale.items} caption="Stale runs, newest delivery first" />
            </section>
          ) : null}
          <section aria-labelledby="consumers-heading">
            <h2 id="consumers-heading">Consumer groups</h2>
            {data.consumers.items.length === 0 ? <p class="muted">No consumer group.</p> : <ConsumerTable groups={data.consumers.items} caption="Consumer groups and their lag" />}
          </section>
          <section aria-labelledby="rejections-heading">
            <h2 id="rejections-heading">Newest rejections</h2>
            {data.rejections.recent.length === 0 ? <p class="muted">Nothing refused.</p> : <RejectionList rejections={data.rejections.recent} />}
          </section>
        </>
      ) : null}
    </>
  );
}
