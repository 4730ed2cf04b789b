import { postgresMissing } from '../bench/support.js';
import { Checker } from './checker.js';
import { floodCatalog } from './flooding.js';
import { pry } from './prying.js';
import { rerunBatches } from './reruns.js';
import { revokeAndReplace } from './revoking.js';
import { expect, Violation } from './violation.js';
import { SimGroup } from './groups.js';
import { live, SimTask, type Attempt, type Machine } from './jobs.js';
import type { Operation, Scenario } from './operations.js';
import { SIM_PG_URL, World, type Tenant } from './world.js';
import { until } from './waiting.js';
import { DeadLetters } from '../src/outbox/file/dead-letters.js';
import { KeyConflictError, StreamStateLostError } from '../src/outbox/index.js';

const TENANT_NAMES = ['acme', 'globex', 'initech'];
/** Delivery rounds without progress before the simulation calls a stream stuck: a liveness failure. */
const STUCK_AFTER_ROUNDS = 60;

/** What a run did, for the figures: operations applied, faults among them, events the server stored. */
export interface SimulationReport {
  operations: number;
  faults: number;
  events: number;
  /** What the faults and mistakes came to, counted: `job process killed at commit:after-write`, `wrong token refused at open`… */
  happened: Record<string, number>;
}

/** Adds `more` into `totals`: a campaign's figures over its runs. */
export function addReport(totals: SimulationReport, more: SimulationReport): void {
  totals.operations += more.operations;
  totals.faults += more.faults;
  totals.events += more.events;
  for (const [what, count] of Object.entries(more.happened)) totals.happened[what] = (totals.happened[what] ?? 0) + count;
}

export const emptyReport = (): SimulationReport => ({ operations: 0, faults: 0, events: 0, happened: {} });

/** A violation with where it happened: the operation's index in the list (or the final phase). */
export class SimulationFailure extends Error {
  constructor(
    readonly violation: Error,
    readonly at: number | 'final',
    readonly operation: Operation | undefined,
  ) {
    super(`${at === 'final' ? 'in the final phase' : `at operation ${at} (${JSON.stringify(operation)})`}: ${violation.message}`, { cause: violation });
  }
}

/** ONCEBOX_SIM_TRACE=1 prints each operation as it is applied: where a run that hangs stands. */
const trace = process.env.ONCEBOX_SIM_TRACE ? (at: number | string, operation?: unknown) => console.error(`sim: ${at}${operation ? ` ${JSON.stringify(operation)}` : ''}`) : () => undefined;

const FAULTS = new Set<Operation['op']>(['crash and restart', 'claim the retry, then a copy claims its number', 'kill the job process', "fill the job process's disk", 'freeze the job process, retry beside it', 'redo published batches', 'retry', 'retry beside a zombie', 'retry elsewhere, then back', 'zombie works after its retry', 'wrong token, then fixed', 'wrong attempt, then fixed', 'lose consumer machine', 'kill the consumer process', 'replace consumer beside its zombie', 'pry', 'revoke a read token, then replace it', 'flood the catalog', 'restart server', 'restore the server from an older backup', 'release held requests']);

/**
 * Runs one scenario against a fresh world: applies its operations one by one, checking every guarantee
 * after each, then lets the world settle (zombies die, every task completes or has failed for good,
 * every file and every consumer delivers) and checks the whole history once more.
 */
export async function simulate(scenario: Scenario): Promise<SimulationReport> {
  trace('scenario', scenario);
  const world = new World(
    scenario.layout.tenants.map((_, i) => TENANT_NAMES[i]!),
    scenario.layout.store === 'postgres' && (await postgresReachable()) ? 'postgres' : 'sqlite',
  );
  await world.start();
  const tasks: SimTask[] = [];
  const groups: SimGroup[] = [];
  try {
    for (const [i, tenant] of world.tenants.entries()) {
      const { tasks: count, sharedFile, resume, batchRows } = scenario.layout.tenants[i]!;
      const shared = world.newPath(`${tenant.name}-run`);
      for (let k = 0; k < count; k++) tasks.push(new SimTask(world, tenant, `task${k}`, sharedFile ? shared : world.newPath(`${tenant.name}-task${k}`), resume, batchRows));
      groups.push(new SimGroup(world, tenant, 'summariser'), new SimGroup(world, tenant, 'closer'));
    }
    for (const task of tasks) await task.start();
    const checker = new Checker(world, tasks, groups);
    const system = new System(world, tasks, groups, checker);
    let faults = 0;
    for (const [index, operation] of scenario.operations.entries()) {
      trace(index, operation);
      try {
        await finishing(`operation ${index}`, async () => {
          await system.apply(operation);
          await checker.check();
        });
      } catch (error) {
        throw new SimulationFailure(error as Error, index, operation);
      }
      if (FAULTS.has(operation.op) || (operation.op === 'deliver' && operation.fault !== 'forward')) faults++;
    }
    try {
      await finishing('the final phase', async () => {
        await system.settle();
        trace('final check');
        await checker.check({ final: true });
      });
    } catch (error) {
      throw new SimulationFailure(error as Error, 'final', undefined);
    }
    return { operations: scenario.operations.length, faults, events: checker.eventsSeen, happened: Object.fromEntries(world.happenings) };
  } finally {
    for (const group of groups) await group.stop().catch(() => undefined);
    for (const task of tasks) {
      task.crash(task.zombie);
      task.crash(task.current);
    }
    await world.stop();
  }
}

let postgres: Promise<boolean> | undefined;

/**
 * Whether the PostgreSQL worlds can run here. Outside CI, without a PostgreSQL, they run on SQLite and
 * say so once; under CI=true a missing PostgreSQL fails the run.
 */
function postgresReachable(): Promise<boolean> {
  postgres ??= postgresMissing(SIM_PG_URL).then((missing) => {
    if (missing === null) return true;
    if (process.env.CI === 'true') throw new Error(`the simulation's PostgreSQL worlds need ${SIM_PG_URL} under CI=true: ${missing}`);
    console.warn(`simulation: no PostgreSQL at ${SIM_PG_URL} (${missing}): its PostgreSQL worlds run on SQLite; set ONCEBOX_TEST_PG`);
    return false;
  });
  return postgres;
}

/** How long one operation (or the final phase) may take on a busy machine before the world is called stuck. */
const STUCK_AFTER_MS = 300_000;

/** Runs `phase`, failing as a liveness violation if it has not finished after STUCK_AFTER_MS: a hang is a failure with a replay, not a test timeout. */
async function finishing(what: string, phase: () => Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const stuck = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Violation('liveness', `${what} had not finished after ${STUCK_AFTER_MS / 1000} s`)), STUCK_AFTER_MS);
  });
  try {
    await Promise.race([phase(), stuck]);
  } finally {
    clearTimeout(timer);
  }
}

/** The world with its tasks and groups, and what each operation does to them. */
class System {
  /** Re-runs so far: each has a run id of its own. */
  private reruns = 0;

  constructor(
    private readonly world: World,
    private readonly tasks: SimTask[],
    private readonly groups: SimGroup[],
    private readonly checker: Checker,
  ) {}

  async apply(operation: Operation): Promise<void> {
    switch (operation.op) {
      case 'commit': {
        const task = this.task(operation.task);
        task.commit(operation.by === 'zombie' ? task.zombie : task.current);
        return;
      }
      case 'commit checkpoint only': {
        const task = this.task(operation.task);
        task.commitSeen(operation.by === 'zombie' ? task.zombie : task.current);
        return;
      }
      case 'deliver': {
        const task = this.task(operation.task);
        const attempt = operation.by === 'zombie' ? task.zombie : task.current;
        if (attempt) await task.step(attempt, operation.fault);
        return;
      }
      case 'deliver together':
        // Every task's relay and every consumer group at once: requests of different tenants' tokens
        // reach the server together and share its group commits.
        await Promise.all([
          ...this.tasks.filter((task) => live(task.current)).map((task) => task.step(task.current, 'forward')),
          ...this.groups.map((group) => group.catchUp()),
        ]);
        return;
      case 'deliver with the relay command':
        return this.task(operation.task).deliverWithRelayCommand();
      case 'end':
        return this.task(operation.task).end(this.task(operation.task).current, operation.how, operation.twice);
      case 'crash and restart':
        return this.task(operation.task).restart();
      case 'kill the job process':
        return this.task(operation.task).killedAt(operation.at, operation.hit, operation.batches);
      case "fill the job process's disk":
        return this.task(operation.task).diskFullAt(operation.at, operation.hit, operation.batches);
      case 'freeze the job process, retry beside it':
        return this.frozenBesideRetry(this.task(operation.task), operation.machine, operation.hit, operation.more, operation.retryFirst);
      case 'relays deliver on their own':
        return this.relaysOnTheirOwn(this.world.tenants[operation.tenant % this.world.tenants.length]!);
      case 'redo published batches':
        return this.redoPublished(this.task(operation.task), operation.batches, operation.changed);
      case 'retry':
        return this.task(operation.task).retry(operation.machine);
      case 'retry beside a zombie':
        return this.task(operation.task).startZombie(operation.machine);
      case 'claim the retry, then a copy claims its number':
        return this.claimedRetries(this.task(operation.task), operation.machine, operation.claim);
      case 'retry elsewhere, then back':
        return this.retryElsewhereThenBack(this.task(operation.task));
      case 'zombie works after its retry':
        return this.zombieWorks(this.task(operation.task), operation.machine, operation.batches, operation.checkpointsOnly, operation.retryFirst, operation.thenBack);
      case 'wrong attempt, then fixed':
        return this.task(operation.task).wrongAttempt(operation.above);
      case 'wrong token, then fixed': {
        const task = this.task(operation.task);
        const neighbour = this.world.tenants.find((tenant) => tenant !== task.tenant)!;
        const token = operation.token === 'neighbour' ? neighbour.tokens.job : task.tenant.tokens[operation.token];
        return task.wrongToken(token);
      }
      case 'rerun earlier batches': {
        const task = this.task(operation.task);
        return rerunBatches(this.world, task.tenant, task.name, operation.batches, `rerun-${++this.reruns}`);
      }
      case 'misspell an asset, then fix it':
        return this.misspellAndFix(this.task(operation.task), operation.retryFirst);
      case 'consume':
        return this.group(operation.group).catchUp(operation.events);
      case 'stop consumer':
        return this.group(operation.group).stop();
      case 'lose consumer machine':
        return this.group(operation.group).loseMachine();
      case 'kill the consumer process': {
        // Work for it first: a batch of one of its tenant's tasks, delivered, so that the process has events to consume.
        const group = this.group(operation.group);
        const task = this.tasks.find((candidate) => candidate.tenant === group.tenant && live(candidate.current) && !candidate.current.ended);
        if (task?.commit(task.current) !== undefined) await this.deliverAll([task.current]);
        return group.killedAt(operation.at, operation.hit);
      }
      case 'replace consumer beside its zombie':
        return this.group(operation.group).replaceBesideZombie(operation.sameFile);
      case 'pry': {
        const [prier, victim] = this.twoTenants(operation.tenant, operation.victim);
        return pry(this.world, prier, victim);
      }
      case 'revoke a read token, then replace it':
        return revokeAndReplace(this.world, this.world.tenants[operation.tenant % this.world.tenants.length]!);
      case 'flood the catalog': {
        const [flooder, other] = this.twoTenants(operation.tenant, operation.other);
        const task = this.task(operation.task);
        return floodCatalog(this.world, flooder, other, async () => {
          task.commit(task.current);
          if (live(task.current)) await this.deliverAll([task.current]);
        });
      }
      case 'release held requests':
        return this.world.proxy.releaseHeld();
      case 'restart server':
        return this.world.restartServer();
      case 'restore the server from an older backup':
        return this.restoreOlderBackup(operation.retries);
      case 'compact':
        // Consumers keep up within the events' retention, as its assumption asks (G15): they catch up first.
        for (const group of this.groups) await group.catchUp();
        await this.checker.check();
        await this.world.compactPast(operation.days);
        return;
    }
  }

  /**
   * A user's mistake and its printed fix: a batch's `ready` event goes to a misspelt asset, the server
   * refuses it as unknown and the row goes dead (the stream goes on); the user applies the fix the
   * refusal names, perhaps only after the task was retried on its machine (the dead row is then an older
   * attempt's), and the row is delivered, once.
   */
  private async misspellAndFix(task: SimTask, retryFirst: boolean): Promise<void> {
    const attempt = task.current;
    if (task.commit(attempt, { typo: true }) === undefined) return;
    await this.deliverAll([attempt]);
    if (retryFirst) await task.retry('same');
    await task.fixTypo();
    await this.deliverAll([task.current]);
  }

  /**
   * G10 where it is hardest: the retry starts beside the attempt before it, commits and delivers a batch
   * (the server now knows the newer attempt), and only then does the zombie work on: it commits its next
   * batches and its relay tries to deliver them. On the retry's file its commits are refused at once; on
   * its own, the server fences its deliveries, and it learns so.
   */
  private async zombieWorks(task: SimTask, machine: Machine, batches: number, checkpointsOnly: boolean, retryFirst: 'batch' | 'checkpoint', thenBack: boolean): Promise<void> {
    if (task.over) return;
    if (!live(task.zombie)) await task.startZombie(machine);
    const { current, zombie } = task;
    if (!live(zombie) || zombie.ended) return;
    // The retry's first delivery: a batch, or a checkpoint alone (a batch that brought no data): either
    // moves the run's epoch to the retry, and fences the zombie.
    if (retryFirst === 'batch' && task.commit(current) === undefined) return;
    if (!task.commitSeen(current)) return;
    await this.deliverAll([current]);
    const label = `${task.tenant.name}/${task.name}`;
    for (let i = 0; i < batches; i++) {
      const committed = checkpointsOnly ? task.commitSeen(zombie) : task.commit(zombie) !== undefined;
      if (zombie.path === current.path && !current.crashed) {
        expect('G10', !committed, () => `${label}: attempt ${zombie.attempt} committed on the file attempt ${current.attempt} opened`);
      }
      if (!committed) {
        this.world.happened(`zombie's commit refused (${zombie.path === current.path ? "on its retry's file" : 'fenced already'})`);
        return;
      }
    }
    // Its relay goes on until it is told it is fenced (its rows parked), or it has nothing left to send.
    for (let round = 0; live(zombie) && zombie.box.file.pendingCount() > 0; round++) {
      await task.step(zombie, 'forward');
      expect('liveness', round < STUCK_AFTER_ROUNDS, () => `${label}: the zombie's relay neither delivered nor learnt of its fence in ${STUCK_AFTER_ROUNDS} rounds`);
      if (zombie.box.file.pendingCount() > 0) this.world.clock += 1001;
    }
    // The server knew of the newer attempt before the zombie's commits reached it: it must have fenced them.
    expect('G10', zombie.fenced || zombie.crashed, () => `${label}: attempt ${zombie.attempt}'s ${checkpointsOnly ? 'checkpoint updates' : 'batches'} were taken after attempt ${current.attempt} delivered`);
    this.world.happened(`zombie fenced by the server after its retry delivered (${checkpointsOnly ? 'checkpoints only' : 'batches'})`);
    if (thenBack && zombie.path !== current.path) {
      // The next retry lands on the zombie's machine: its file's checkpoint counts the batches the zombie
      // committed, so the retry must take over and deliver the rows the fence parked (G12), not redo them.
      await task.retryAt(zombie.path);
      this.world.happened("a retry took over a fenced zombie's parked rows");
    }
  }

  /**
   * A job process frozen after its `hit`-th batch (SIGSTOP: a paused VM) loses its heartbeat; the runner
   * starts the next attempt on the same machine or a fresh one, which delivers first a batch, or only
   * its last batch's event announced again (a duplicate on the server: the retry's request stores
   * nothing, and still moves the run's epoch), or announced to the misspelt asset (refused while it is
   * unknown: a request of one refusal moves the epoch too); then the frozen process goes on, and must
   * learn that it is fenced (G10) without any of its later batches taken (the checker's G3 and G10).
   * A misspelt announcement is then fixed as its refusal says.
   */
  private async frozenBesideRetry(task: SimTask, machine: 'same' | 'fresh', hit: number, more: number, retryFirst: 'batch' | 'announcement' | 'misspelt announcement'): Promise<void> {
    const machineOfFrozen = task.current.path;
    const frozen = await task.freeze(hit, more);
    if (frozen === undefined) return;
    try {
      await task.retry(machine);
      const announced = retryFirst !== 'batch' && task.announceAgain(task.current, { typo: retryFirst === 'misspelt announcement' });
      if (!announced && task.commit(task.current) === undefined) task.commitSeen(task.current);
      await this.deliverAll([task.current]);
      await task.thaw(frozen, machineOfFrozen);
      if (announced && retryFirst === 'misspelt announcement') {
        await task.fixTypo();
        await this.deliverAll([task.current]);
      }
    } finally {
      if (frozen.running()) await frozen.stop('SIGKILL');
    }
  }

  /**
   * The tenant's tasks run with their relays in process, on their own, as jobs do: each commits a batch,
   * and every file must deliver within a minute; on a shared file only one relay holds the lease, and it
   * must see and deliver the other tasks' commits, made on other connections (G3). Then the relays are
   * stepped by the scenario again.
   */
  private async relaysOnTheirOwn(tenant: Tenant): Promise<void> {
    const started: SimTask[] = [];
    try {
      for (const task of this.tasks.filter((candidate) => candidate.tenant === tenant && live(candidate.current))) {
        if (await task.relayOnItsOwn()) started.push(task);
      }
      // One task after another, each once the file is idle: a relay that holds the lease and sleeps must
      // be woken by a commit made on another connection.
      for (const task of started) {
        if (!task.current.ended) task.commit(task.current);
        const waiting = () => started.filter((other) => live(other.current) && other.current.box.file.pendingCount() > 0);
        const delivered = await until(() => (waiting().length === 0 ? true : undefined));
        expect('liveness', delivered === true, () => `${tenant.name}: relays in process left ${waiting().map((other) => `${other.name}: ${other.current.box.file.pendingCount()} rows`).join(', ')} undelivered for a minute, after ${task.name} committed`);
      }
      const files = new Set(started.map((task) => task.current.path));
      this.world.happened(files.size < started.length ? 'relays in process delivered a shared file' : 'relays in process delivered');
    } finally {
      for (const task of started) await task.relayByHand();
    }
  }

  /**
   * A user's mistake: the job ignores its checkpoint and does its last batches again, perhaps with data
   * that changed since (a recount: the same key, other content). The same content is absorbed as
   * duplicates (G3); changed content is refused, with `key_conflict`: at commit, as a KeyConflictError,
   * when the file still holds the batch's row, or by the server, as a dead row that `dead retry` will not
   * send again. The fix printed for it is applied: the row dropped on the record and the same content
   * emitted; the batch stays on the server once, as first published.
   */
  private async redoPublished(task: SimTask, batches: number, changed: boolean): Promise<void> {
    const attempt = task.current;
    if (task.over || !live(attempt) || attempt.ended) return;
    const label = `${task.tenant.name}/${task.name}`;
    const last = task.batch(attempt);
    if (changed) this.world.expectedRefusals.add(`${task.producer} key_conflict`);
    for (let batch = Math.max(1, last - batches + 1); batch <= last; batch++) {
      const change = changed && batch === last;
      try {
        if (task.commit(attempt, { batch, changed: change }) === undefined) return;
      } catch (error) {
        expect('G19', change && error instanceof KeyConflictError && error.code === 'key_conflict', () => `${label}: batch ${batch} done again ${change ? 'with other content' : 'alike'} failed with ${String(error)}`);
        this.world.happened('changed content refused at commit (key_conflict)');
        if (task.commit(attempt, { batch }) === undefined) return;
      }
    }
    await this.deliverAll([attempt]);
    if (!live(attempt)) return;
    const letters = new DeadLetters(attempt.box.file);
    const conflicts = letters.list().filter((row) => row.code === 'key_conflict');
    if (conflicts.length === 0) return;
    this.world.happened('changed content refused by the server (key_conflict)');
    const { retried, skipped } = letters.retry('all', 'the simulation tries every dead row');
    expect('G3', conflicts.every((row) => skipped.some((skip) => skip.id === row.id) && !retried.some((again) => again.id === row.id)), () => `${label}: dead retry sent a key_conflict row again (${JSON.stringify(retried)})`);
    // As the refusal's fix says: the same content for the same key; the conflicting row dropped on the record first.
    for (const row of conflicts) letters.discard([row.id], 'the same content is emitted again');
    if (task.commit(attempt, { batch: last }) !== undefined) await this.deliverAll([attempt]);
  }

  /**
   * Attempts claimed from the server, as runners whose counters cannot be trusted open them: the retry
   * claims its attempt (the next the server hands out, or exactly the runner's number); then a copy of it
   * starts elsewhere proposing the same number, is refused and asked again, and runs as the newest (G26);
   * the attempt it found, fenced by that claim, commits and delivers, and must learn that it is fenced (G10).
   */
  private async claimedRetries(task: SimTask, machine: Machine, claim: 'claim' | 'exactly'): Promise<void> {
    if (task.over) return;
    await task.claimedRetry(machine, claim);
    await task.copyClaimsSameNumber();
    const { zombie } = task;
    if (!live(zombie) || zombie.ended || task.commit(zombie) === undefined) return;
    for (let round = 0; live(zombie) && zombie.box.file.pendingCount() > 0; round++) {
      await task.step(zombie, 'forward');
      expect('liveness', round < STUCK_AFTER_ROUNDS, () => `${task.tenant.name}/${task.name}: the zombie's relay neither delivered nor learnt of its fence in ${STUCK_AFTER_ROUNDS} rounds`);
      if (zombie.box.file.pendingCount() > 0) this.world.clock += 1001;
    }
    expect('G10', zombie.fenced || zombie.crashed, () => `${task.tenant.name}/${task.name}: attempt ${zombie.attempt} delivered after attempt ${task.current.attempt} claimed the run`);
    this.world.happened('a zombie fenced by a claim');
  }

  /**
   * The server is restored from an older backup (SQLite's online backup, docs/operations.md): taken at a
   * quiet moment, then every live task commits and delivers a batch, then the backup goes back. A relay
   * whose stream the server now has behind stops with `stream_state_lost`, marks nothing and says so in
   * `status()` (it never resends out of order). The documented fix is applied: every job of the runs is
   * stopped, its file moved aside, and each task not over is retried on a fresh machine with a higher
   * attempt (numbered, or claimed from the server), resuming from what the backup holds; what it lost is
   * published again as the tasks go on (the checker forgets it with the server).
   */
  private async restoreOlderBackup(retries: 'numbered' | 'claim'): Promise<void> {
    if (this.world.store !== 'sqlite') {
      this.world.happened('no backup restored (a PostgreSQL world)');
      return;
    }
    // A quiet moment: held requests arrive, zombies are gone, every file delivers, every group drains.
    await this.world.proxy.releaseHeld();
    for (const task of this.tasks) {
      task.crash(task.zombie);
      task.zombie = undefined;
    }
    await this.deliverAll(this.tasks.map((task) => task.current));
    for (const group of this.groups) {
      await group.catchUp();
      await group.drain();
    }
    await this.checker.check();
    const backedUpTo = this.checker.newestCursor;
    const backup = await this.world.backup();
    // The jobs go on after the backup: what they deliver now, the backup does not hold.
    const touched = this.tasks.filter((task) => !task.over && live(task.current) && !task.current.ended && task.commit(task.current) !== undefined);
    await this.deliverAll(touched.map((task) => task.current));
    await this.world.restore(backup);
    this.checker.forgetAfter(backedUpTo);
    // A job goes on with its relay in process: its relay must stop, mark nothing, and say so.
    const witness = touched.find((task) => live(task.current));
    if (witness !== undefined && (await witness.relayOnItsOwn())) {
      try {
        await this.streamStateLost(witness);
      } finally {
        await witness.relayByHand();
      }
    }
    // As docs/operations.md says: stop every job of the runs, move their files aside (a file the tasks
    // shared is one new file on their first machine), retry on fresh files.
    const movedAside = new Map<string, string>();
    for (const task of this.tasks) {
      const path = movedAside.get(task.firstMachine) ?? this.world.newPath(`${task.tenant.name}-moved-aside`);
      movedAside.set(task.firstMachine, path);
      task.firstMachine = path;
    }
    for (const task of this.tasks) {
      if (task.over) continue;
      if (retries === 'claim') await task.claimedRetry('fresh', 'claim');
      else await task.retry('fresh');
    }
    this.world.happened(`the server restored from an older backup, the runs retried on fresh machines (${retries})`);
  }

  /**
   * After a restore from an older backup, `task`'s job commits a batch with its relay in process: the
   * server expects positions the file settled long ago, so the relay stops with `stream_state_lost`
   * rather than resend out of order; it marks nothing, `status()` shows it, and the batch's receipt
   * rejects with it (G3, G19).
   */
  private async streamStateLost(task: SimTask): Promise<void> {
    const attempt = task.current;
    const label = `${task.tenant.name}/${task.name}`;
    const committed = task.commit(attempt);
    if (committed === undefined) return;
    const pending = attempt.box.file.pendingCount();
    let outcome: unknown;
    committed.ready.receipt().then(
      () => (outcome = 'delivered'),
      (error: unknown) => (outcome = error),
    );
    const stopped = await until(() => (attempt.box.status().lastError?.code === 'stream_state_lost' && outcome !== undefined ? true : undefined));
    expect('G19', stopped === true, () => `${label}: after a restore, its relay's stop was not shown: status() says ${JSON.stringify(attempt.box.status().lastError)}, the receipt ${String(outcome)}`);
    expect('G3', outcome instanceof StreamStateLostError, () => `${label}: after a restore, the batch's receipt came to ${String(outcome)}`);
    expect('G3', attempt.box.file.pendingCount() === pending, () => `${label}: a relay stopped by stream_state_lost changed the rows waiting (${pending} before, ${attempt.box.file.pendingCount()} after)`);
    this.world.happened('a relay stopped with stream_state_lost after a restore');
  }

  /**
   * A retry on a fresh machine gets further (it commits a batch and delivers it), then the task's next
   * retry lands back on its first machine, whose file (shared with the run's other tasks, perhaps) is
   * behind: as a scheduler's hand-outs go, and what the BullMQ adapter's `server-newer` resume is for.
   */
  private async retryElsewhereThenBack(task: SimTask): Promise<void> {
    if (task.over) return;
    await task.retry('fresh');
    task.commit(task.current);
    await this.deliverAll([task.current]);
    await task.retry('first');
  }

  /** Steps the attempts' relays without faults until their files hold nothing to deliver. */
  private async deliverAll(attempts: Attempt[]): Promise<void> {
    for (let stuck = 0; ; ) {
      const waiting = attempts.filter((attempt) => live(attempt) && attempt.box.file.pendingCount() > 0);
      if (waiting.length === 0) return;
      const before = waiting.map((attempt) => attempt.box.file.pendingCount());
      for (const attempt of waiting) await this.taskOf(attempt).step(attempt, 'forward');
      const progressed = waiting.some((attempt, i) => !live(attempt) || attempt.box.file.pendingCount() < before[i]!);
      if (progressed) {
        stuck = 0;
        continue;
      }
      if (++stuck > STUCK_AFTER_ROUNDS) {
        throw new Violation('liveness', `rows of ${waiting.map((attempt) => attempt.path).join(', ')} were not delivered after ${STUCK_AFTER_ROUNDS} rounds without faults`);
      }
      // Another relay may hold the file's lease (a crashed process's): it lapses with time.
      this.world.clock += 1001;
    }
  }

  /**
   * The world settles, as it does once its faults stop: zombies die; a task whose attempt is gone or
   * failed with a retry is retried on its machine, commits up to the furthest batch any attempt reached
   * and completes; every file delivers; every consumer group catches up and delivers what it emitted.
   */
  async settle(): Promise<void> {
    trace('settle: release held requests, kill zombies, complete every task');
    await this.world.proxy.releaseHeld();
    for (const task of this.tasks) {
      task.crash(task.zombie);
      task.zombie = undefined;
    }
    for (const task of this.tasks) {
      if (task.over) {
        if (task.current.crashed) await task.restart();
        continue;
      }
      if (!live(task.current) || task.current.ended) await task.retry('same');
      task.end(task.current, 'complete');
      const newest = task.current;
      if (task.outcome !== 'complete') throw new Violation('liveness', `${task.tenant.name}/${task.name}: its newest attempt ${newest.attempt} could not complete (crashed ${newest.crashed}, fenced ${newest.fenced})`);
    }
    trace('settle: deliver every file');
    await this.deliverAll(this.tasks.map((task) => task.current));
    for (const group of this.groups) {
      trace(`settle: ${group.name} catches up`);
      await group.catchUp();
    }
    for (const group of this.groups) {
      trace(`settle: ${group.name} drains`);
      await group.drain();
    }
  }

  /** Two different tenants, drawn as indexes: the first, and another. */
  private twoTenants(first: number, second: number): [Tenant, Tenant] {
    const { tenants } = this.world;
    const one = tenants[first % tenants.length]!;
    return [one, tenants[(first + 1 + (second % (tenants.length - 1))) % tenants.length]!];
  }

  private task(index: number): SimTask {
    return this.tasks[index % this.tasks.length]!;
  }

  private taskOf(attempt: Attempt): SimTask {
    return this.tasks.find((task) => task.current === attempt || task.zombie === attempt)!;
  }

  private group(index: number): SimGroup {
    return this.groups[index % this.groups.length]!;
  }
}
