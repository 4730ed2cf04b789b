import { canonicalJson } from '../protocol/canonical-json.js';
import { isLifecycleAsset } from '../protocol/lifecycle.js';

/** One event as the checker compares it: what it announces and what it carries. */
export interface Publication {
  asset: string;
  partitionKey: string | null;
  partitionDate: string | null;
  extra: unknown;
  /**
   * The task of the run that published it. Events of one task keep their commit order; two tasks of a
   * run have no order between them (they may run at once, on one outbox file too), so order is compared
   * within each task. @defaultValue one order for all
   */
  task?: string | null | undefined;
}

/** What a run left: the job's events on the server (in cursor order), its files, and what its files parked. */
export interface RunHistory {
  events: Publication[];
  /** The run's checkpoints as the server mirrors them at the end (the job's progress); undefined for none. */
  checkpoints: Record<string, unknown> | undefined;
  /** The job's data store: each file's path and content digest. */
  data: ReadonlyMap<string, string>;
  /** Emissions the job's outbox files parked as refused for good (fenced ones left out: a zombie's). */
  refused: { asset: string; partitionKey: string | null; code: string; reason: string }[];
  /**
   * A consumer's declared effects (`JobUnderTest.effects`), one canonical JSON row per effect, from the
   * one file the run used; undefined when none are declared or the run moved to a fresh machine.
   */
  effects?: string[] | undefined;
}

/** What can go wrong with a run's history, against a clean run of the same job. */
export type AnomalyKind =
  /** An event a clean run publishes is not on the server. */
  | 'lost'
  /** As `lost`, while the run's checkpoint says the work is done: its checkpoint got ahead of its events. */
  | 'checkpoint-ahead'
  /** An event is on the server more often than a clean run publishes it (a trigger firing twice, for a consumer). */
  | 'duplicated'
  /** An event on the server that no clean run publishes: a partition key that differs on a re-run. */
  | 'unexpected'
  /** An event whose payload differs from a clean run's, or that the server refused as a changed payload. */
  | 'changed'
  /** Events in another order than a clean run publishes them. */
  | 'reordered'
  /** An emission the server refused for good. */
  | 'refused'
  /** The job's data store differs from a clean run's: a data write that is not idempotent. */
  | 'data-differs'
  /** A consumer's declared effect applied another number of times than in a clean run: twice, or lost. */
  | 'effect-differs'
  /** An attempt that nothing killed exited with a failure (a zombie may: its FencedError is its right end). */
  | 'failed'
  /** An attempt ran past the job's time limit. */
  | 'hung';

/** One anomaly, about one event (asset and partition), one data file, or one attempt. */
export interface Anomaly {
  kind: AnomalyKind;
  /** The event's asset; `data` for a data file; `effect` for a declared effect; `attempt` for an attempt. */
  asset: string;
  /** The event's partition key (the batch it concerns); the data file's path; the effect's row; the attempt's number. */
  partitionKey: string | null;
  detail: string;
}

const identity = (event: { asset: string; partitionKey: string | null }) => `${event.asset} ${event.partitionKey ?? '(no partition)'}`;
// A lifecycle event says which attempt ended the run, which a scenario changes on purpose: its identity is compared, not its payload.
const payload = (event: Publication) => (isLifecycleAsset(event.asset) ? '' : canonicalJson({ partitionDate: event.partitionDate, extra: event.extra ?? null }, 'event'));

/**
 * Compares what a run left with what a clean run of the same job leaves (`expected`: one run, no faults,
 * no kills), and reports each anomaly with the event or file it concerns. A correct job leaves exactly
 * the clean run's events (each once, in the same order, with the same payloads), the same data, and no
 * refusals, whatever crashed, retried or ran beside it. With `payloads: false` only which events, how
 * often and in which order are compared: for a history whose clean run is a list of partitions.
 */
export function checkHistory(expected: RunHistory, actual: RunHistory, options: { payloads?: boolean } = {}): Anomaly[] {
  const anomalies: Anomaly[] = [];
  const count = (events: Publication[]) => {
    const counts = new Map<string, { event: Publication; count: number }>();
    for (const event of events) {
      const entry = counts.get(identity(event));
      if (entry) entry.count++;
      else counts.set(identity(event), { event, count: 1 });
    }
    return counts;
  };
  const wanted = count(expected.events);
  const got = count(actual.events);
  const done = expected.checkpoints !== undefined && canonicalJson(actual.checkpoints ?? null, 'checkpoints') === canonicalJson(expected.checkpoints, 'checkpoints');
  const refusedFor = new Map(actual.refused.map((row) => [identity(row), row]));
  // An asset with events no clean run publishes: its missing ones most likely went out under other
  // partition keys, which is not a checkpoint committed without its event.
  const strangers = new Set(actual.events.filter((event) => !wanted.has(identity(event))).map((event) => event.asset));

  for (const [id, { event, count: want }] of wanted) {
    const have = got.get(id)?.count ?? 0;
    const at = { asset: event.asset, partitionKey: event.partitionKey };
    if (have === 0) {
      const refused = refusedFor.get(id);
      if (refused !== undefined) continue; // told below, with the server's reason
      anomalies.push(
        done && !strangers.has(event.asset)
          ? { kind: 'checkpoint-ahead', ...at, detail: `never published, though the run's checkpoint says its work is done (${canonicalJson(actual.checkpoints ?? null, 'checkpoints')}): the checkpoint was committed without this event (or a commit that threw was skipped)` }
          : { kind: 'lost', ...at, detail: 'never published; a clean run publishes it' },
      );
    } else if (have > want) {
      anomalies.push({ kind: 'duplicated', ...at, detail: `published ${have} times; a clean run publishes it ${want === 1 ? 'once' : `${want} times`}` });
    }
  }
  for (const [id, { event, count: have }] of got) {
    if (wanted.has(id)) continue;
    anomalies.push({ kind: 'unexpected', asset: event.asset, partitionKey: event.partitionKey, detail: `published ${have === 1 ? 'once' : `${have} times`}, though a clean run publishes no such event: its partition key differs on a re-run` });
  }
  // A job may publish several events with one identity (no partition key, or one partition announced
  // twice with different payloads): an event is changed when its payload is none of a clean run's for it.
  const cleanPayloads = new Map<string, Set<string>>();
  for (const event of expected.events) cleanPayloads.set(identity(event), (cleanPayloads.get(identity(event)) ?? new Set()).add(payload(event)));
  for (const event of options.payloads === false ? [] : actual.events) {
    const clean = cleanPayloads.get(identity(event));
    if (clean === undefined || clean.has(payload(event))) continue;
    anomalies.push({ kind: 'changed', asset: event.asset, partitionKey: event.partitionKey, detail: `published with ${payload(event)}; a clean run publishes ${[...clean].join(' or ')}: its payload differs on a re-run` });
  }
  for (const row of actual.refused) {
    const kind = row.code === 'key_conflict' ? 'changed' : 'refused';
    const detail =
      kind === 'changed'
        ? `sent again with another payload under the key it had, and refused (key_conflict): its payload differs on a re-run`
        : `refused by the server for good (${row.code}): ${row.reason}`;
    anomalies.push({ kind, asset: row.asset, partitionKey: row.partitionKey, detail });
  }
  const order = (events: Publication[], keep: (id: string) => boolean) => [...new Set(events.map(identity))].filter(keep);
  for (const task of new Set([...expected.events, ...actual.events].map((event) => event.task ?? null))) {
    const ofTask = (events: Publication[]) => events.filter((event) => (event.task ?? null) === task);
    const actualOrder = order(ofTask(actual.events), (id) => wanted.has(id));
    const expectedOrder = order(ofTask(expected.events), (id) => got.has(id));
    const at = actualOrder.findIndex((id, index) => id !== expectedOrder[index]);
    if (at < 0) continue;
    const first = actual.events.find((event) => identity(event) === actualOrder[at])!;
    const where = task === null ? '' : ` of task ${task}`;
    anomalies.push({ kind: 'reordered', asset: first.asset, partitionKey: first.partitionKey, detail: `published in place ${at + 1}${where}, where a clean run publishes ${expectedOrder[at]}` });
  }
  for (const path of new Set([...expected.data.keys(), ...actual.data.keys()])) {
    const want = expected.data.get(path);
    const have = actual.data.get(path);
    if (want === have) continue;
    const detail = want === undefined ? 'written, though a clean run writes no such file' : have === undefined ? 'missing; a clean run writes it' : 'differs from what a clean run writes: a data write that is not idempotent (an append, a counter)';
    anomalies.push({ kind: 'data-differs', asset: 'data', partitionKey: path, detail });
  }
  if (expected.effects !== undefined && actual.effects !== undefined) anomalies.push(...effectsDiffer(expected.effects, actual.effects));
  return withPairedKeys(anomalies);
}

/** Each declared effect applied as often as in a clean run: once, for a consumer that keeps its promise. */
function effectsDiffer(expected: readonly string[], actual: readonly string[]): Anomaly[] {
  const times = (rows: readonly string[]) => rows.reduce((counts, row) => counts.set(row, (counts.get(row) ?? 0) + 1), new Map<string, number>());
  const want = times(expected);
  const have = times(actual);
  return [...new Set([...want.keys(), ...have.keys()])]
    .filter((row) => want.get(row) !== have.get(row))
    .map((row) => {
      const [w, h] = [want.get(row) ?? 0, have.get(row) ?? 0];
      const detail = h === 0 ? `never applied; a clean run applies it ${w === 1 ? 'once' : `${w} times`}` : `applied ${h === 1 ? 'once' : `${h} times`}; a clean run applies it ${w === 0 ? 'never' : w === 1 ? 'once' : `${w} times`}`;
      return { kind: 'effect-differs' as const, asset: 'effect', partitionKey: row, detail: `${detail}: an effect written outside ctx.commit` };
    });
}

/**
 * A lost event beside an unexpected one of the same asset is most often one event whose partition key
 * changed on the re-run (taken from a clock, the attempt, a random value): each says so, naming the other.
 */
function withPairedKeys(anomalies: Anomaly[]): Anomaly[] {
  const of = (kind: AnomalyKind, asset: string) => anomalies.filter((anomaly) => anomaly.asset === asset && anomaly.kind === kind);
  return anomalies.map((anomaly) => {
    if (anomaly.kind !== 'lost' && anomaly.kind !== 'unexpected') return anomaly;
    const others = of(anomaly.kind === 'lost' ? 'unexpected' : 'lost', anomaly.asset).map((other) => other.partitionKey ?? '(no partition)');
    if (others.length === 0) return anomaly;
    const hint = anomaly.kind === 'lost' ? `published as ${others.join(', ')} instead?` : `meant as ${others.join(', ')}?`;
    return { ...anomaly, detail: `${anomaly.detail} (${hint} a partition key that depends on the attempt, a clock or chance)` };
  });
}

/** Anomalies as a person reads them: one line each, the kind, the event or file, and what is wrong. */
export function describeAnomalies(anomalies: readonly Anomaly[]): string[] {
  const subject = (anomaly: Anomaly) => (['data', 'attempt', 'effect'].includes(anomaly.asset) ? `${anomaly.asset} ${anomaly.partitionKey}` : identity(anomaly));
  return anomalies.map((anomaly) => `${anomaly.kind.padEnd(16)} ${subject(anomaly)}: ${anomaly.detail}`);
}
