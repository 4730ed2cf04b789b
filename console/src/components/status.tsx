import type { ApiError } from '../api.js';
import { withVisibleControls } from '../format.js';

/** What a view shows while it has nothing yet, or when its request failed: never a blank page. */
export function LoadState({ loading, error }: { loading: boolean; error: ApiError | undefined }) {
  if (error) {
    return (
      <p class="error" role="alert">
        {withVisibleControls(error.message)} <code>[{error.code}]</code>
      </p>
    );
  }
  return loading ? (
    <p class="muted loading" role="status">
      Loading…
    </p>
  ) : null;
}

/** A coloured word for a state, with the word itself as its meaning (colour is never the only cue). */
export function Badge({ kind, children }: { kind: string; children: string }) {
  return <span class={`badge badge-${kind}`}>{children}</span>;
}
