import fc from 'fast-check';
import type { Fault } from '../src/testing/fault-proxy.js';
import type { ConsumerKillPoint } from './groups.js';
import type { ForwarderKillPoint } from './forwarding.js';
import type { DiskFullPoint, Ending, JobKillPoint, Machine } from './jobs.js';
import type { StoreKind } from './world.js';

/**
 * How the simulated world is laid out: its server's store, its tenants, each with one run of one to three tasks, the tasks
 * sharing one outbox file or each with its own. Part of what a seed draws, and shrunk with the operations.
 */
export interface Layout {
  /** The server's store: a SQLite file, or two instances over one PostgreSQL schema. */
  store: StoreKind;
  /** `resume` as the tenant's jobs open their files: the default, or as the BullMQ adapter does. */
  tenants: { tasks: number; sharedFile: boolean; resume: 'fresh-file' | 'server-newer'; batchRows: number }[];
}

/**
 * One thing that happens in the world, as plain data: a failing list prints as JSON and replays from it.
 * `task`, `group` and `tenant` are taken modulo the world's tasks, groups and tenants, so that any list shrinks to a valid one.
 */
export type Operation =
  | { op: 'commit'; task: number; by: 'current' | 'zombie' }
  | { op: 'commit checkpoint only'; task: number; by: 'current' | 'zombie' }
  | { op: 'deliver'; task: number; by: 'current' | 'zombie'; fault: Fault }
  | { op: 'deliver together' }
  | { op: 'deliver with the relay command'; task: number }
  | { op: 'end'; task: number; how: Ending; twice: boolean; retryAtOnce: boolean }
  | { op: 'crash and restart'; task: number }
  | { op: 'kill the job process'; task: number; at: JobKillPoint; hit: number; batches: number }
  | { op: 'fill the job process\'s disk'; task: number; at: DiskFullPoint; hit: number; batches: number }
  | { op: 'freeze the job process, retry beside it'; task: number; machine: 'same' | 'fresh'; hit: number; more: number; retryFirst: 'batch' | 'announcement' | 'misspelt announcement' }
  | { op: 'relays deliver on their own'; tenant: number }
  | { op: 'redo published batches'; task: number; batches: number; changed: boolean }
  | { op: 'retry'; task: number; machine: Machine }
  | { op: 'retry beside a zombie'; task: number; machine: Machine }
  | { op: 'claim the retry, then a copy claims its number'; task: number; machine: Machine; claim: 'claim' | 'exactly' }
  | { op: 'retry elsewhere, then back'; task: number }
  | { op: 'zombie works after its retry'; task: number; machine: Machine; batches: number; checkpointsOnly: boolean; retryFirst: 'batch' | 'checkpoint'; thenBack: boolean }
  | { op: 'rerun earlier batches'; task: number; batches: number }
  | { op: 'misspell an asset, then fix it'; task: number; retryFirst: boolean }
  | { op: 'wrong attempt, then fixed'; task: number; above: number }
  | { op: 'wrong token, then fixed'; task: number; token: 'reader' | 'consumer' | 'neighbour' }
  | { op: 'consume'; group: number; events: number }
  | { op: 'stop consumer'; group: number }
  | { op: 'lose consumer machine'; group: number }
  | { op: 'kill the consumer process'; group: number; at: ConsumerKillPoint; hit: number }
  | { op: 'replace consumer beside its zombie'; group: number; sameFile: boolean }
  | { op: 'pry'; tenant: number; victim: number }
  | { op: 'revoke a read token, then replace it'; tenant: number }
  | { op: 'flood the catalog'; tenant: number; other: number; task: number }
  /** Not drawn: the simulation reads the console in some scenarios (see derivedOperationsOf), so that adding it left every seed's draws as they were. */
  | { op: 'read the console'; tenant: number; other: number; task: number }
  /** Not drawn either: a tenant's BullMQ queue runs its jobs to their end in some scenarios, with mischief from `seed`. */
  | { op: 'run a BullMQ queue'; tenant: number; seed: number }
  /** Not drawn either: a consumer process killed after its first delivery, its machine then lost, in some scenarios. */
  | { op: 'kill the consumer process after its first delivery, then lose its machine'; group: number }
  /** Not drawn either: the tasks of a tenant that share a file commit in turn, in some scenarios. */
  | { op: 'commit in turn on a shared file'; tenant: number }
  /** Not drawn either: a neighbour on another address holds connections without a token, in some scenarios. */
  | { op: 'hold connections from another address'; task: number }
  /** Not drawn either: a new version of a task's job keeps its checkpoint in another shape, in some scenarios. */
  | { op: "change the checkpoint's schema, then fix it"; task: number; machine: Machine }
  /** Not drawn either: a re-run's partition fired for, then the closer's machine lost, in some scenarios. */
  | { op: "lose a closer's machine after a re-run"; tenant: number }
  /** Not drawn either: a task whose run failed for good is tried again after all, in some scenarios. */
  | { op: 'try a run failed for good again after all'; task: number; machine: Machine }
  /** Not drawn either: a tenant's closer's firings forwarded to Airflow, its forwarder killed and replaced, in some scenarios. */
  | { op: 'forward to Airflow'; tenant: number; point: ForwarderKillPoint; hit: number; machine: 'same' | 'fresh' }
  | { op: 'release held requests' }
  | { op: 'restart server' }
  | { op: 'restore the server from an older backup'; retries: 'numbered' | 'claim' }
  | { op: 'compact'; days: number };

const faults: Fault[] = ['forward', 'forward', 'forward', 'drop-request', 'drop-response', 'duplicate', 'delay', 'fail-503', 'hold'];
const task = fc.nat({ max: 8 });
const group = fc.nat({ max: 5 });
const tenant = fc.nat({ max: 2 });
const machine = fc.constantFrom<Machine>('same', 'fresh', 'first');

/** Weighted so that most of a run is work (commits, deliveries, consumption) and faults come between. */
export const operationArbitrary: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 12, arbitrary: fc.record({ op: fc.constant('commit' as const), task, by: fc.constantFrom('current' as const, 'current' as const, 'zombie' as const) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('commit checkpoint only' as const), task, by: fc.constantFrom('current' as const, 'current' as const, 'zombie' as const) }) },
  { weight: 14, arbitrary: fc.record({ op: fc.constant('deliver' as const), task, by: fc.constantFrom('current' as const, 'current' as const, 'zombie' as const), fault: fc.constantFrom(...faults) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('deliver together' as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('deliver with the relay command' as const), task }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('end' as const), task, how: fc.constantFrom<Ending>('complete', 'fail with a retry', 'fail with a retry', 'fail for good'), twice: fc.boolean(), retryAtOnce: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('crash and restart' as const), task }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('kill the job process' as const),
      task,
      at: fc.constantFrom<JobKillPoint>('commit:before', 'commit:after-write', 'commit:after-commit', 'relay:after-response'),
      hit: fc.integer({ min: 1, max: 3 }),
      batches: fc.integer({ min: 1, max: 3 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant("fill the job process's disk" as const),
      task,
      at: fc.constantFrom<DiskFullPoint>('commit:after-write', 'relay:after-response'),
      hit: fc.integer({ min: 1, max: 2 }),
      batches: fc.integer({ min: 1, max: 3 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('freeze the job process, retry beside it' as const),
      task,
      machine: fc.constantFrom('same' as const, 'fresh' as const),
      hit: fc.integer({ min: 1, max: 2 }),
      more: fc.integer({ min: 1, max: 2 }),
      retryFirst: fc.constantFrom('batch' as const, 'announcement' as const, 'misspelt announcement' as const),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('relays deliver on their own' as const), tenant }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('redo published batches' as const), task, batches: fc.integer({ min: 1, max: 2 }), changed: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('retry' as const), task, machine }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('retry beside a zombie' as const), task, machine }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('claim the retry, then a copy claims its number' as const), task, machine, claim: fc.constantFrom('claim' as const, 'exactly' as const) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('retry elsewhere, then back' as const), task }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('zombie works after its retry' as const), task, machine, batches: fc.integer({ min: 1, max: 3 }), checkpointsOnly: fc.boolean(), retryFirst: fc.constantFrom('batch' as const, 'checkpoint' as const), thenBack: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('wrong attempt, then fixed' as const), task, above: fc.integer({ min: 1001, max: 990_000 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('wrong token, then fixed' as const), task, token: fc.constantFrom('reader' as const, 'consumer' as const, 'neighbour' as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('rerun earlier batches' as const), task, batches: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('misspell an asset, then fix it' as const), task, retryFirst: fc.boolean() }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('consume' as const), group, events: fc.integer({ min: 1, max: 20 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('stop consumer' as const), group }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('lose consumer machine' as const), group }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('kill the consumer process' as const),
      group,
      at: fc.constantFrom<ConsumerKillPoint>('consume:before-handler', 'commit:after-write', 'consume:after-commit', 'relay:after-response'),
      hit: fc.integer({ min: 1, max: 2 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('replace consumer beside its zombie' as const), group, sameFile: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('pry' as const), tenant, victim: tenant }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('revoke a read token, then replace it' as const), tenant }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('flood the catalog' as const), tenant, other: tenant, task }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('release held requests' as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('restart server' as const) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('restore the server from an older backup' as const), retries: fc.constantFrom('numbered' as const, 'claim' as const) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('compact' as const), days: fc.integer({ min: 1, max: 3 }) }) },
);

export const layoutArbitrary: fc.Arbitrary<Layout> = fc.record({
  store: fc.constantFrom<StoreKind>('sqlite', 'postgres'),
  tenants: fc.array(
    fc.record({
      tasks: fc.integer({ min: 1, max: 3 }),
      sharedFile: fc.boolean(),
      resume: fc.constantFrom('fresh-file' as const, 'server-newer' as const),
      // Rows a relay request holds: 2 cuts every batch's commit in two, 3 puts two events in some requests.
      batchRows: fc.integer({ min: 2, max: 3 }),
    }),
    { minLength: 2, maxLength: 3 },
  ),
});

/** A whole scenario: the world's layout and what happens in it. */
export const scenarioArbitrary = (maxOperations: number) =>
  fc.record({ layout: layoutArbitrary, operations: fc.array(operationArbitrary, { minLength: 1, maxLength: maxOperations, size: 'max' }) });

export type Scenario = { layout: Layout; operations: Operation[] };

/**
 * The operations a scenario runs without drawing them, each after the operation it names: the web
 * console read in one scenario of three (by its length), after its middle operation, as a tenant chosen
 * by its length; a tenant's BullMQ queue run in one of eight (its worker processes are the dearest part
 * of a run), after its first third, its mischief seeded from the scenario; a neighbour holding
 * connections in one of three, after two thirds; a tenant's tasks
 * that share a file committing in turn in one of four, after the middle; a summariser's consumer
 * process killed after its first delivery and its machine lost, in one of six; a closer's machine lost
 * after it fired for a re-run's partition, in one of four, after two thirds; a run that failed for good
 * tried again after all, in one of three, after five sixths; a tenant's closer's firings forwarded to Airflow
 * by a forwarder process killed at a failpoint and replaced, in one of five, after two thirds; and in one of
 * five, after its first quarter, a job process frozen beside a retry on a fresh machine whose first
 * request is its last batch announced again (a duplicate) or announced to the misspelt asset (a
 * refusal): requests that store nothing and must still move the run's epoch, which the drawn
 * operations reach too rarely. Derived rather than drawn, so that the operations every seed draws stay as they
 * were when these were added, and a replay or a shrunk scenario runs them alike.
 */
export function derivedOperationsOf(scenario: Scenario): { after: number; operation: Operation }[] {
  const n = scenario.operations.length;
  const derived: { after: number; operation: Operation }[] = [];
  if (n < 4) return derived;
  if (n % 8 === 2) derived.push({ after: Math.floor(n / 3), operation: { op: 'run a BullMQ queue', tenant: n + 2, seed: hash(JSON.stringify(scenario)) } });
  if (n % 3 === 0) derived.push({ after: Math.floor(n / 2), operation: { op: 'read the console', tenant: n, other: n + 1, task: n } });
  if (n % 3 === 1) derived.push({ after: Math.floor((2 * n) / 3), operation: { op: 'hold connections from another address', task: n } });
  // Tenants whose tasks share a file; those whose requests hold three rows first, which can carry two of a stream's events.
  const sharing = scenario.layout.tenants.flatMap((tenant, i) => (tenant.sharedFile && tenant.tasks > 1 ? [i] : [])).sort((a, b) => scenario.layout.tenants[b]!.batchRows - scenario.layout.tenants[a]!.batchRows);
  if (n % 4 === 3 && sharing.length > 0) derived.push({ after: Math.floor(n / 2), operation: { op: 'commit in turn on a shared file', tenant: sharing[0]! } });
  if (n % 6 === 5) derived.push({ after: Math.floor(n / 2) + 1, operation: { op: 'kill the consumer process after its first delivery, then lose its machine', group: 2 * n } });
  if (n % 4 === 2) derived.push({ after: Math.floor((2 * n) / 3), operation: { op: "lose a closer's machine after a re-run", tenant: n } });
  if (n % 5 === 1) derived.push({ after: Math.floor((2 * n) / 3), operation: { op: 'forward to Airflow', tenant: n, point: n % 2 === 0 ? 'forward:before-post' : 'forward:after-post', hit: 1 + (n % 3), machine: n % 4 < 2 ? 'fresh' : 'same' } });
  if (n % 3 === 2) derived.push({ after: Math.floor((5 * n) / 6), operation: { op: 'try a run failed for good again after all', task: n, machine: n % 2 === 1 ? 'fresh' : 'same' } });
  if (n % 4 === 1) derived.push({ after: Math.floor((3 * n) / 4), operation: { op: "change the checkpoint's schema, then fix it", task: n + 1, machine: n % 8 === 1 ? 'fresh' : 'same' } });
  if (n % 5 === 3) {
    const retryFirst = n % 2 === 1 ? 'announcement' : 'misspelt announcement';
    // A task whose retries resume from their own file, where there is one: a retry that takes the server's
    // newer state may send more than the announcement in its first request.
    const tasks = scenario.layout.tenants.flatMap((tenant) => Array.from({ length: tenant.tasks }, () => tenant.resume));
    const fromFile = tasks.flatMap((resume, i) => (resume === 'fresh-file' ? [i] : []));
    const task = fromFile.length > 0 ? fromFile[n % fromFile.length]! : n;
    derived.push({ after: Math.floor(n / 4), operation: { op: 'freeze the job process, retry beside it', task, machine: 'fresh', hit: 1, more: 2, retryFirst } });
  }
  return derived;
}

/** A string's 32-bit FNV-1a hash: a seed that a replay of the same scenario finds again. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
