import { RejectionCode } from './errors.js';
import { isLifecycleAsset } from './lifecycle.js';

/**
 * What fixes each refusal, in one sentence with the command, for people who see it away from the job
 * (the console, `oncebox ls rejections`). A refused row stays dead in the job's outbox file; after the
 * cause is fixed, `oncebox dead retry` sends it again, in order.
 */
const RETRY = 'then send the dead rows again: oncebox dead retry <outbox file> --all';

const FIXES: Record<RejectionCode, (asset: string | null) => string> = {
  [RejectionCode.UnknownAsset]: (asset) =>
    `Register the asset (oncebox server --assets FILE, or PUT /v1/assets/${asset ?? '<asset>'} with an admin token), ${RETRY}.`,
  [RejectionCode.Forbidden]: () =>
    `Give the job a token that may publish this asset (or name this cause: --consumes), ${RETRY}.`,
  [RejectionCode.InvalidItem]: () =>
    'Fix the emission in the job (the detail names the field), run it again under a new key; discard the dead row on the record: oncebox dead discard <outbox file> --all.',
  [RejectionCode.KeyConflict]: () =>
    'A re-run emitted other content under a key it emitted before: emit the same asset, partition and extra for the same key, or use a new key (a new run id).',
  [RejectionCode.SequenceReused]: () =>
    'Two writers used one stream position: give each its own run id or task, and never copy an outbox file between live jobs.',
  [RejectionCode.AttemptTooHigh]: () =>
    "Send the runner's real try number as the attempt (or raise the server's maxAttemptStep), " + RETRY + '.',
  [RejectionCode.FeedbackLoop]: () =>
    'The consumer emits what it consumes: emit another asset or partition, or allow the cycle on the server (lineage.cycles).',
  [RejectionCode.LineageTooDeep]: () => "Shorten the chain of consumers, or raise the server's lineage.maxDepth, " + RETRY + '.',
  [RejectionCode.TooManyCheckpoints]: () => 'Keep several values in one checkpoint (an object) rather than a checkpoint each.',
};

/**
 * A lifecycle notice refused as invalid: one a 0.1.0 server refused after a retry took it over, which
 * the server takes now, or one refused for its content, which `dead retry` keeps dead and says so.
 */
const NOTICE_FIX =
  "Send it again: oncebox dead retry <outbox file> --all (or let the run's next attempt on the file take it over). " +
  'If dead retry keeps it dead, its content is refused: discard it on the record, oncebox dead discard <outbox file> --id N.';

/** The fix of a refusal with this code (of this asset, when known). */
export function rejectionFix(code: RejectionCode, asset: string | null): string {
  if (code === RejectionCode.InvalidItem && asset !== null && isLifecycleAsset(asset)) return NOTICE_FIX;
  return (FIXES[code] ?? (() => `See docs/protocol.md for ${code}.`))(asset);
}
