import { z } from 'zod';
import type { CommitTransaction } from '../outbox/commit/commit.js';
import type { Outbox } from '../outbox/outbox.js';
import { refusePromise } from '../outbox/commit/sync-callback.js';
import { assetNameSchema } from '../protocol/emission.js';
import { resolveOptions } from '../protocol/options.js';
import type { Same } from '../protocol/same-type.js';
import { nameSchema, type StoredEvent } from '../protocol/wire.js';
import { ConsumeTransaction } from './consume-transaction.js';
import type { ConsumerStatements } from './statements.js';

const triggerSpecSchema = z.strictObject({
  /** The assets that must all have an event for a partition before the trigger fires for it. */
  when: z.array(assetNameSchema).min(1, { error: 'must list at least one asset' }),
  /** What joins the events: their partition key (the only join so far). */
  by: z.literal('partitionKey').default('partitionKey'),
  /**
   * What a newer event (a re-run's, say) for a partition the trigger already fired for does: 'ignore'
   * (default) or 'refresh', which fires it again with `ctx.refresh` set.
   */
  onNewer: z.enum(['ignore', 'refresh']).default('ignore'),
  /** The trigger's name in the file; its state is kept under it. @defaultValue the assets joined with "+" */
  name: nameSchema.optional(),
});

/** What `consumer.trigger` takes. */
export interface TriggerSpec {
  /** The assets that must all have an event for a partition before the trigger fires for it. */
  when: string[];
  /** What joins the events: their partition key. @defaultValue 'partitionKey' */
  by?: 'partitionKey' | undefined;
  /** What a newer event for an already fired partition does: 'ignore', or 'refresh' (fire again). @defaultValue 'ignore' */
  onNewer?: 'ignore' | 'refresh' | undefined;
  /** The trigger's name in the file. @defaultValue the assets joined with "+" */
  name?: string | undefined;
}
const triggerSpecIsDocumented: Same<TriggerSpec, z.input<typeof triggerSpecSchema>> = true;
void triggerSpecIsDocumented;

/** What a trigger's handler gets besides the partition and its events. */
export interface TriggerContext {
  /** This firing's transaction: its writes and emissions commit with the firing's record. */
  tx: ConsumeTransaction;
  /** True when this firing is a refresh: the trigger fired for this partition before. */
  refresh: boolean;
  /** 1 for the first firing of this partition, 2 for its first refresh, and so on. */
  firing: number;
}

/**
 * A trigger's handler. It runs inside the transaction that consumes the completing event, so it must be
 * synchronous: its effect, the firing's record and the cursor commit together, exactly once.
 */
export type TriggerHandler = (partitionKey: string, events: StoredEvent[], ctx: TriggerContext) => void;

/** @internal A registered trigger. */
export class Trigger {
  readonly name: string;
  readonly when: readonly string[];
  readonly onNewer: 'ignore' | 'refresh';

  constructor(
    spec: TriggerSpec,
    private readonly handler: TriggerHandler,
  ) {
    const resolved = resolveOptions(triggerSpecSchema, spec, 'consumer.trigger');
    this.when = [...new Set(resolved.when)];
    this.name = resolved.name ?? this.when.join('+');
    this.onNewer = resolved.onNewer;
  }

  /**
   * Feeds one consumed event to the trigger, inside its consuming transaction; fires when it completes a
   * partition. With `replay`, it only rebuilds the state (a fresh file catching up to its mirrored
   * cursor): the firings it finds were made, and committed, by the file that consumed those events.
   */
  feed(event: StoredEvent, context: { statements: ConsumerStatements; commit: CommitTransaction; box: Outbox; replay: boolean }): void {
    const { partitionKey } = event;
    if (partitionKey === null || !this.when.includes(event.asset)) return;
    const s = context.statements;
    const at = { trigger: this.name, partitionKey };
    const fired = s.firing.get(at)?.fired ?? 0;
    if (fired > 0 && this.onNewer === 'ignore') return;
    s.saveArrival.run({ ...at, asset: event.asset, event: JSON.stringify(event) });
    const arrivals = new Map(s.arrivals.all(at).map((row) => [row.asset, row.event]));
    if (this.when.some((asset) => !arrivals.has(asset))) return;
    const firing = fired + 1;
    if (!context.replay) {
      const events = this.when.map((asset) => JSON.parse(arrivals.get(asset)!) as StoredEvent);
      // The scope keeps each trigger's keys its own whatever the order triggers are registered in; within
      // one commit the occurrence count alone would already tell two triggers' emissions apart.
      // Stryker disable next-line StringLiteral: with one registration order, the occurrence count gives the same keys
      const tx = new ConsumeTransaction(context.commit, context.box, [event], `trigger/${this.name}/${firing}`);
      try {
        refusePromise(this.handler(partitionKey, events, { tx, refresh: firing > 1, firing }));
      } finally {
        tx.end();
      }
    }
    s.saveFiring.run({ ...at, fired: firing, lastCursor: event.cursor, now: Date.now() });
  }
}
