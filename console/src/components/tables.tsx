import { Link } from 'wouter-preact';
import type { AssetSummary, ConsumerGroup, Rejection, StreamSummary } from '../../../src/protocol/catalog.js';
import { streamPath } from '../api.js';
import { ago, count, streamName } from '../format.js';
import { Badge } from './status.js';
import { Text } from './text.js';

/** The tables the overview and the list pages share: one row per item, every name a link. */

export function AssetTable({ assets, caption }: { assets: AssetSummary[]; caption: string }) {
  return (
    <table>
      <caption>{caption}</caption>
      <thead>
        <tr>
          <th scope="col">Asset</th>
          <th scope="col" class="num">Events</th>
          <th scope="col" class="num">Partitions</th>
          <th scope="col" class="num">Duplicates absorbed</th>
          <th scope="col">Last event</th>
          <th scope="col">Produced by</th>
        </tr>
      </thead>
      <tbody>
        {assets.map((asset) => (
          <tr key={asset.name} data-asset={asset.name}>
            <th scope="row">
              <Link href={`/assets/${encodeURIComponent(asset.name)}`}>
                <Text value={asset.name} />
              </Link>
              {asset.registered ? null : <span class="muted"> (lifecycle)</span>}
            </th>
            <td class="num">{count(asset.events)}</td>
            <td class="num">{count(asset.partitions)}</td>
            <td class="num">{count(asset.duplicates)}</td>
            <td>{asset.lastEvent ? <time dateTime={asset.lastEvent.timestamp}>{ago(asset.lastEvent.timestamp)}</time> : 'none yet'}</td>
            <td>
              {asset.lastEvent ? (
                <Link href={streamPath(asset.lastEvent)}>
                  <Text value={streamName(asset.lastEvent)} /> · attempt {asset.lastEvent.attempt}
                </Link>
              ) : (
                '–'
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function outcomeBadge(stream: Pick<StreamSummary, 'outcome' | 'willRetry'>) {
  if (stream.outcome === 'stale') return <Badge kind="stale">{stream.willRetry ? 'stale · its retry never came' : 'stale'}</Badge>;
  if (stream.willRetry) return <Badge kind="retrying">running · retry to come</Badge>;
  return <Badge kind={stream.outcome}>{stream.outcome}</Badge>;
}

export function StreamTable({ streams, caption }: { streams: StreamSummary[]; caption: string }) {
  return (
    <table>
      <caption>{caption}</caption>
      <thead>
        <tr>
          <th scope="col">Stream</th>
          <th scope="col">Kind</th>
          <th scope="col">Outcome</th>
          <th scope="col" class="num">Epoch</th>
          <th scope="col">Fenced attempts</th>
          <th scope="col" class="num">Duplicates absorbed</th>
          <th scope="col">Last delivery</th>
        </tr>
      </thead>
      <tbody>
        {streams.map((stream) => (
          <tr key={streamName(stream)} data-stream={streamName(stream)}>
            <th scope="row">
              <Link href={streamPath(stream)}>
                <Text value={streamName(stream)} />
              </Link>
            </th>
            <td>{stream.kind}</td>
            <td>{outcomeBadge(stream)}</td>
            <td class="num">{stream.epoch}</td>
            <td>{stream.fencedAttempts.length === 0 ? '–' : stream.fencedAttempts.join(', ')}</td>
            <td class="num">{count(stream.duplicates)}</td>
            <td>
              <time dateTime={stream.lastDeliveryAt}>{ago(stream.lastDeliveryAt)}</time>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function ConsumerTable({ groups, caption }: { groups: ConsumerGroup[]; caption: string }) {
  return (
    <table>
      <caption>{caption}</caption>
      <thead>
        <tr>
          <th scope="col">Group</th>
          <th scope="col" class="num">Lag (events)</th>
          <th scope="col" class="num">Cursor</th>
          <th scope="col" class="num">Newest event</th>
          <th scope="col" class="num">Epoch</th>
          <th scope="col">Last fetch</th>
          <th scope="col">Assets</th>
        </tr>
      </thead>
      <tbody>
        {groups.map((group) => (
          <tr key={`${group.producer}/${group.group}`} data-group={group.group}>
            <th scope="row">
              <Link href={streamPath({ producer: group.producer, runId: group.group, task: null })}>
                <Text value={group.producer === group.group ? group.group : `${group.producer}/${group.group}`} />
              </Link>
            </th>
            <td class="num" data-testid="lag">
              {group.lag === null ? (
                <span class="muted" title="Counted only over the assets your token reads events of: it reads none of this group's.">–</span>
              ) : group.lag > 0 ? (
                <Badge kind="lagging">{`${count(group.lag)}${group.lagCapped ? '+' : ''}`}</Badge>
              ) : (
                '0'
              )}
            </td>
            <td class="num">{group.cursor}</td>
            <td class="num">{group.newestCursor ?? '–'}</td>
            <td class="num">{group.epoch}</td>
            <td>{group.lastFetchAt ? <time dateTime={group.lastFetchAt}>{ago(group.lastFetchAt)}</time> : 'never'}</td>
            <td>{group.assets === null ? 'not named (older consumer)' : <Text value={group.assets.join(', ')} />}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function RejectionList({ rejections }: { rejections: Rejection[] }) {
  return (
    <ul class="rejections">
      {rejections.map((rejection) => (
        <li key={`${streamName(rejection)}#${rejection.attempt}.${rejection.seq}`} data-code={rejection.code}>
          <p>
            <Badge kind="failed">{rejection.code}</Badge>{' '}
            <Link href={streamPath(rejection)}>
              <Text value={streamName(rejection)} />
            </Link>{' '}
            · attempt {rejection.attempt} · seq {rejection.seq}
            {rejection.asset ? (
              <>
                {' '}
                · <Text value={rejection.asset} />
                {rejection.partitionKey === null ? null : (
                  <>
                    {' / '}
                    <Text value={rejection.partitionKey} />
                  </>
                )}
              </>
            ) : null}{' '}
            · <time dateTime={rejection.at}>{ago(rejection.at)}</time>
          </p>
          <p class="detail">
            <Text value={rejection.detail} wrap />
          </p>
          <p class="fix">
            <strong>Fix:</strong> <Text value={rejection.fix} wrap />
          </p>
        </li>
      ))}
    </ul>
  );
}
