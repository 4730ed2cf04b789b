import { ProducerErrorCode, RejectionCode } from './errors.js';
import { isLifecycleAsset } from './lifecycle.js';

/*
 * What fixes each dead row, by its code: one table, which every place that tells a user what to do reads
 * (`close()`, `oncebox status`, `oncebox dead retry`, the server's catalog and so the console), so that
 * none of them advises what another refuses. A refused row stays dead in the job's outbox file; whether
 * `oncebox dead retry` may send it again is decided here too.
 */

/** What is done about a dead row: whether `oncebox dead retry` sends it again, and the fix in one or two sentences. */
export interface DeadRowRemedy {
  /** `oncebox dead retry` sends it again once the cause is fixed; otherwise it keeps it dead, with `fix` as the reason. */
  retry: boolean;
  fix: string;
}

/** The dead row the remedy is for: its asset, and where it waits, when known (the server knows neither file nor id). */
export interface DeadRowPlace {
  asset: string | null;
  /** The job's outbox file; `<outbox file>` when unknown. */
  file?: string | undefined;
  /** The rows' ids in that file (rows of one code may share a remedy); `N` when unknown. */
  ids?: readonly number[] | undefined;
  /** For a refused lifecycle notice: whether it says what a terminal commit writes (see NOTICE). */
  wellFormedNotice?: boolean | undefined;
}

type Place = Required<Pick<DeadRowPlace, 'file'>> & DeadRowPlace & { idText: string };

/** A refused asset may be a typo, which neither registering it nor widening a token to it fixes. */
const MISSPELT = 'If the name is misspelt, correct it in the job and publish those partitions again instead (docs/runbook.md).';
const retryAll = (place: Place) => `then send the dead rows again: oncebox dead retry ${place.file} --all`;
const discard = (place: Place) => `drop ${place.ids?.length === 1 || place.ids === undefined ? 'this row' : 'these rows'} on the record: oncebox dead discard ${place.file} ${place.idText}`;

const REMEDIES: Record<RejectionCode | typeof ProducerErrorCode.Fenced, (place: Place) => DeadRowRemedy> = {
  [RejectionCode.UnknownAsset]: (place) => ({
    retry: true,
    fix: `Register the asset (oncebox server --assets FILE, or PUT /v1/assets/${place.asset ?? '<asset>'} with an admin token), ${retryAll(place)}. ${MISSPELT}`,
  }),
  [RejectionCode.Forbidden]: (place) => ({
    retry: true,
    fix: `Give the job a token that may publish this asset (or name this cause: --consumes), ${retryAll(place)}. ${MISSPELT}`,
  }),
  [RejectionCode.InvalidItem]: (place) => ({
    retry: false,
    fix: `The server refuses its content, and would again: fix the emission in the job (the detail names the field) and emit it anew under a new key, then ${discard(place)}.`,
  }),
  [RejectionCode.KeyConflict]: (place) => ({
    retry: false,
    fix:
      'The server holds other content under this key, stored first, and keeps it; sending this again would conflict again. ' +
      `Emit the same asset, partition, date and extra for the same key (no timestamps in extra), or the new content under a new key (a new run id); then ${discard(place)}.`,
  }),
  [RejectionCode.SequenceReused]: (place) => ({
    retry: false,
    fix:
      'Another row holds its stream position: two writers used one run and task at once (an outbox file copied between live jobs, or one attempt run twice). ' +
      `Give each writer its own run id or task; then ${discard(place)}.`,
  }),
  [RejectionCode.AttemptTooHigh]: (place) => ({
    retry: true,
    fix: `Send the runner's real try number as the attempt (or raise the server's maxAttemptStep), ${retryAll(place)}.`,
  }),
  [RejectionCode.FeedbackLoop]: (place) => ({
    retry: true,
    fix: `The consumer emits what it consumes: emit another asset or partition (then ${discard(place)}), or allow the cycle on the server (lineage.cycles), ${retryAll(place)}.`,
  }),
  [RejectionCode.LineageTooDeep]: (place) => ({ retry: true, fix: `Shorten the chain of consumers, or raise the server's lineage.maxDepth, ${retryAll(place)}.` }),
  [RejectionCode.TooManyCheckpoints]: () => ({ retry: false, fix: 'Keep several values in one checkpoint (an object) rather than a checkpoint each.' }),
  [ProducerErrorCode.Fenced]: () => ({
    retry: false,
    fix: "A later attempt of the run took it over and delivers the run now. To send these rows, start the run's next attempt on this file: it takes the parked rows over.",
  }),
};

/**
 * A lifecycle notice refused as invalid though it says what a terminal commit writes: refused by a 0.1.0
 * server after a retry took it over, which the server takes now. One refused for its content is an
 * invalid item like any other.
 */
const NOTICE: (place: Place) => DeadRowRemedy = (place) => ({
  retry: true,
  fix: `Send it again: oncebox dead retry ${place.file} --all (or let the run's next attempt on the file take it over).`,
});

/** What to do about a dead row of this code, and whether `oncebox dead retry` sends it again. */
export function deadRowRemedy(code: string, where: DeadRowPlace): DeadRowRemedy {
  const place: Place = { ...where, file: where.file ?? '<outbox file>', idText: (where.ids ?? ['N']).map((id) => `--id ${id}`).join(' ') };
  if (code === RejectionCode.InvalidItem && place.asset !== null && isLifecycleAsset(place.asset)) {
    // The server cannot tell the two kinds of refused notice apart; it names both ways out.
    if (where.wellFormedNotice === undefined) {
      return { retry: true, fix: `${NOTICE(place).fix} If dead retry keeps it dead, its content is refused: ${discard(place)}.` };
    }
    if (where.wellFormedNotice) return NOTICE(place);
  }
  const remedy = REMEDIES[code as keyof typeof REMEDIES];
  return remedy ? remedy(place) : { retry: true, fix: `See docs/protocol.md for ${code}.` };
}

/** The fix of a refusal with this code (of this asset, when known), as the server's catalog gives it. */
export function rejectionFix(code: RejectionCode, asset: string | null): string {
  return deadRowRemedy(code, { asset }).fix;
}
