import { Link, useSearch } from 'wouter-preact';
import type { EventPage } from '../../../src/protocol/wire.js';
import { streamPath, withQuery } from '../api.js';
import { LoadState } from '../components/status.js';
import { streamName } from '../format.js';
import { useApi } from '../use-api.js';
import { Text } from '../components/text.js';

/** One stored event, whole, as GET /v1/events returns it. */
export function EventPageView({ cursor }: { cursor: number }) {
  const asset = new URLSearchParams(useSearch()).get('asset') ?? undefined;
  const { data, error, loading } = useApi<EventPage>(withQuery('v1/events', { after: cursor - 1, limit: 1, asset }));
  const event = data?.events.find((candidate) => candidate.cursor === cursor);
  return (
    <>
      <h1>Event {cursor}</h1>
      <LoadState loading={loading} error={error} />
      {data && !event ? <p class="error" role="alert">No event {cursor} here (removed by retention, or of another asset).</p> : null}
      {event ? (
        <>
          <p>
            <Text value={event.asset} />
            {event.partitionKey === null ? null : (
              <>
                {' / '}
                <Text value={event.partitionKey} />
              </>
            )}
            , produced by{' '}
            <Link href={streamPath(event)}>
              <Text value={streamName(event)} /> · attempt {event.attempt}
            </Link>
            .
          </p>
          <pre data-testid="event-json">{JSON.stringify(event, null, 2)}</pre>
        </>
      ) : null}
    </>
  );
}
