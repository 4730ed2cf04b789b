import { useSearch } from 'wouter-preact';
import type { AttemptSummary, StreamDetail } from '../../../src/protocol/catalog.js';
import type { StoredEvent } from '../../../src/protocol/wire.js';
import { withQuery } from '../api.js';
import { LoadState } from '../components/status.js';
import { outcomeBadge, RejectionList } from '../components/tables.js';
import { ago, count, streamName } from '../format.js';
import { useApi } from '../use-api.js';
import { Text } from '../components/text.js';

/**
 * One run (or consumer group): its attempts over time and which fenced which, the retries absorbed, its
 * checkpoints, the emissions a failure held, its outcome and its refusals.
 */
export function RunPage({ producer, runId }: { producer: string; runId: string }) {
  const task = new URLSearchParams(useSearch()).get('task') ?? undefined;
  const { data, error, loading } = useApi<StreamDetail>(withQuery(`v1/catalog/streams/${encodeURIComponent(producer)}/${encodeURIComponent(runId)}`, { task }));
  return (
    <>
      <h1>
        {data?.kind === 'consumer' ? 'Consumer group' : 'Run'}{' '}
        <span class="name">
          <Text value={streamName({ producer, runId, task: task ?? null })} />
        </span>
      </h1>
      <LoadState loading={loading} error={error} />
      {data ? (
        <>
          <dl class="facts">
            <div>
              <dt>Outcome</dt>
              <dd data-testid="run-outcome">{outcomeBadge(data)}</dd>
            </div>
            <div>
              <dt>Epoch (current attempt)</dt>
              <dd data-testid="run-epoch">{data.epoch}</dd>
            </div>
            <div>
              <dt>Last sequence number</dt>
              <dd>{data.lastSeq}</dd>
            </div>
            <div>
              <dt>Duplicates absorbed</dt>
              <dd data-testid="run-duplicates">{count(data.duplicates)}</dd>
            </div>
            <div>
              <dt>Last delivery</dt>
              <dd>{ago(data.lastDeliveryAt)}</dd>
            </div>
          </dl>
          <section aria-labelledby="attempts-heading">
            <h2 id="attempts-heading">Attempts</h2>
            <Timeline attempts={data.attempts} />
            <table>
              <caption>Each attempt of the run, and which later attempt fenced it</caption>
              <thead>
                <tr>
                  <th scope="col">Attempt</th>
                  <th scope="col">First delivered</th>
                  <th scope="col">Last delivered</th>
                  <th scope="col" class="num">Last seq</th>
                  <th scope="col" class="num">Duplicates absorbed</th>
                  <th scope="col" class="num">Items refused as fenced</th>
                  <th scope="col">Fenced by</th>
                </tr>
              </thead>
              <tbody>
                {data.attempts.map((attempt) => (
                  <tr key={attempt.attempt} data-attempt={attempt.attempt}>
                    <th scope="row">{attempt.attempt}</th>
                    <td>{attempt.firstAt ?? 'never'}</td>
                    <td>{attempt.lastAt ?? 'never'}</td>
                    <td class="num">{attempt.lastSeq}</td>
                    <td class="num">{attempt.duplicates}</td>
                    <td class="num">{attempt.fencedItems}</td>
                    <td data-testid={`fenced-by-${attempt.attempt}`}>{attempt.fencedBy === null ? 'current' : `attempt ${attempt.fencedBy}`}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </section>
          <section aria-labelledby="checkpoints-heading">
            <h2 id="checkpoints-heading">Checkpoints</h2>
            {Object.keys(data.checkpoints).length === 0 ? (
              <p class="muted">No checkpoint mirrored.</p>
            ) : (
              <pre data-testid="checkpoints">{JSON.stringify(data.checkpoints, null, 2)}</pre>
            )}
          </section>
          <section aria-labelledby="lifecycle-heading">
            <h2 id="lifecycle-heading">Outcomes and held emissions</h2>
            {data.lifecycle.length === 0 ? <p class="muted">The run has not ended (no box.complete() or box.fail() yet).</p> : <Lifecycle events={data.lifecycle} />}
          </section>
          <section aria-labelledby="rejections-heading">
            <h2 id="rejections-heading">Rejections</h2>
            {data.rejections.length === 0 ? <p class="muted">Nothing refused.</p> : <RejectionList rejections={data.rejections} />}
          </section>
        </>
      ) : null}
    </>
  );
}

/** The attempts as bars on one time axis, from first to last delivery: a retry and its zombie side by side. */
function Timeline({ attempts }: { attempts: AttemptSummary[] }) {
  const times = attempts.flatMap((attempt) => [attempt.firstAt, attempt.lastAt]).filter((at): at is string => at !== null).map(Date.parse);
  if (times.length === 0) return null;
  const start = Math.min(...times);
  const span = Math.max(1, Math.max(...times) - start);
  return (
    <ol class="timeline" aria-label="Attempts over time">
      {attempts.map((attempt) => {
        const from = attempt.firstAt === null ? 0 : ((Date.parse(attempt.firstAt) - start) / span) * 100;
        const to = attempt.lastAt === null ? from : ((Date.parse(attempt.lastAt) - start) / span) * 100;
        return (
          <li key={attempt.attempt}>
            <span class="label">attempt {attempt.attempt}</span>
            <span class="track">
              <span
                class={`bar ${attempt.fencedBy === null ? 'bar-current' : 'bar-fenced'}`}
                style={{ marginLeft: `${from}%`, width: `${Math.max(1.5, to - from)}%` }}
              />
            </span>
            <span class="muted">{attempt.fencedBy === null ? 'current' : `fenced by ${attempt.fencedBy}${attempt.fencedItems > 0 ? `, ${attempt.fencedItems} zombie ${attempt.fencedItems === 1 ? "item" : "items"} refused` : ''}`}</span>
          </li>
        );
      })}
    </ol>
  );
}

function Lifecycle({ events }: { events: StoredEvent[] }) {
  return (
    <ul class="lifecycle">
      {events.map((event) => {
        const extra = (event.extra ?? {}) as { outcome?: string; attempt?: number; fencedBy?: number; error?: { message: string }; willRetry?: boolean; held?: number };
        return (
          <li key={event.cursor} data-outcome={extra.outcome}>
            <strong>{extra.outcome}</strong> · attempt {extra.attempt ?? event.attempt} · <time dateTime={event.timestamp}>{event.timestamp}</time>
            {extra.outcome === 'failed' ? (
              <span>
                {' '}
                · <Text value={extra.error?.message ?? ''} wrap /> · {extra.held ?? 0} held emissions {extra.willRetry ? 'kept for the retry' : 'discarded (failed for good)'}
              </span>
            ) : null}
            {extra.outcome === 'fenced' ? <span> · superseded by attempt {extra.fencedBy}</span> : null}
          </li>
        );
      })}
    </ul>
  );
}
