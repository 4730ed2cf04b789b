import { postgresMissing } from '../bench/support.js';
import { Checker } from './checker.js';
import { floodCatalog } from './flooding.js';
import { SimForwarder, simAirflowAvailable, startSimAirflow } from './forwarding.js';
import { pry } from './prying.js';
import { rerunBatches } from './reruns.js';
import { revokeAndReplace, revokeEveryToken } from './revoking.js';
import { expect, Violation } from './violation.js';
import { SimGroup } from './groups.js';
import { live, SimTask, type Attempt } from './jobs.js';
import { derivedOperationsOf, type Operation, type Scenario } from './operations.js';
import { SimQueue } from './queue.js';
import { holdConnections } from './connections.js';
import { commitInTurn } from './shared-file.js';
import { SIM_PG_URL, World, type Tenant } from './world.js';
import { STUCK_AFTER_ROUNDS, until } from './waiting.js';
import { claimedRetries, frozenBesideRetry, zombieWorks } from './zombies.js';
import { changeSchemaAndFix, misspellAndFix, redoPublished } from './mistakes.js';
import { restoreOlderBackup } from './restoring.js';
import { readConsole } from './console-reading.js';
import type { Scene } from './scene.js';

const TENANT_NAMES = ['acme', 'globex', 'initech'];

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

/**
 * ONCEBOX_SIM_TRACE=1 prints each operation as it is applied, after how long the step before it took
 * (`sim: +812ms 14 {…}`): where a run that hangs stands, and where a slow one spends its time.
 */
let lastTrace = Date.now();
const trace = process.env.ONCEBOX_SIM_TRACE
  ? (at: number | string, operation?: unknown) => {
      const now = Date.now();
      console.error(`sim: +${now - lastTrace}ms ${at}${operation ? ` ${JSON.stringify(operation)}` : ''}`);
      lastTrace = now;
    }
  : () => undefined;

const FAULTS = new Set<Operation['op']>(['crash and restart', 'claim the retry, then a copy claims its number', 'kill the job process', "fill the job process's disk", 'freeze the job process, retry beside it', 'redo published batches', 'retry', 'retry beside a zombie', 'retry elsewhere, then back', 'zombie works after its retry', 'wrong token, then fixed', 'wrong attempt, then fixed', 'lose consumer machine', "lose a closer's machine after a re-run", 'forward to Airflow', 'kill the consumer process', 'replace consumer beside its zombie', 'pry', 'revoke a read token, then replace it', 'flood the catalog', 'restart server', 'restore the server from an older backup', 'release held requests']);

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
  const queues: SimQueue[] = [];
  const forwarders: SimForwarder[] = [];
  try {
    for (const [i, tenant] of world.tenants.entries()) {
      const { tasks: count, sharedFile, resume, batchRows } = scenario.layout.tenants[i]!;
      const shared = world.newPath(`${tenant.name}-run`);
      for (let k = 0; k < count; k++) tasks.push(new SimTask(world, tenant, `task${k}`, sharedFile ? shared : world.newPath(`${tenant.name}-task${k}`), resume, batchRows));
      groups.push(new SimGroup(world, tenant, 'summariser'), new SimGroup(world, tenant, 'closer'));
    }
    for (const task of tasks) await task.start();
    const checker = new Checker(world, tasks, groups, queues);
    const system = new System(world, tasks, groups, queues, checker, forwarders);
    let faults = 0;
    const derived = derivedOperationsOf(scenario);
    // Airflow starts (a minute on a busy machine) before the operations, not inside one's time limit.
    if (derived.some(({ operation }) => operation.op === 'forward to Airflow') && simAirflowAvailable()) await startSimAirflow();
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
      for (const { operation: then } of derived.filter((candidate) => candidate.after === index)) {
        trace(`${index} then`, then);
        try {
          await finishing(`the derived ${then.op}`, async () => {
            await system.apply(then);
            await checker.check();
          });
        } catch (error) {
          throw new SimulationFailure(error as Error, index, then);
        }
      }
      if (FAULTS.has(operation.op) || (operation.op === 'deliver' && operation.fault !== 'forward')) faults++;
    }
    try {
      await finishing('the final phase', async () => {
        await system.settle();
        trace('final check');
        await checker.check({ final: true });
        for (const forwarder of forwarders) {
          trace(`${forwarder.name} catches up`);
          await forwarder.catchUp();
          await forwarder.check(checker.seen, true);
        }
        trace('every token revoked');
        await revokeEveryToken(world);
      });
    } catch (error) {
      throw new SimulationFailure(error as Error, 'final', undefined);
    }
    return { operations: scenario.operations.length, faults, events: checker.eventsSeen, happened: Object.fromEntries(world.happenings) };
  } finally {
    for (const queue of queues) await queue.close().catch(() => undefined);
    for (const forwarder of forwarders) await forwarder.close().catch(() => undefined);
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
class System implements Scene {
  /** Re-runs so far: each has a run id of its own. */
  private reruns = 0;
  /** How often a closer lost its machine: every other time, a re-run follows its rebuild. */
  private closerLosses = 0;

  constructor(
    readonly world: World,
    readonly tasks: SimTask[],
    readonly groups: SimGroup[],
    readonly queues: SimQueue[],
    readonly checker: Checker,
    readonly forwarders: SimForwarder[],
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
      case 'end': {
        const task = this.task(operation.task);
        task.end(task.current, operation.how, operation.twice);
        // A runner that retries a failed attempt at once, on its machine: the retry opens the file
        // before the failure's notice was delivered, and must take the notice over and deliver it (G12, G25).
        if (operation.retryAtOnce && task.outcome === 'fail with a retry') await task.retry('same');
        return;
      }
      case 'crash and restart':
        return this.task(operation.task).restart();
      case 'kill the job process':
        return this.task(operation.task).killedAt(operation.at, operation.hit, operation.batches);
      case "fill the job process's disk":
        return this.task(operation.task).diskFullAt(operation.at, operation.hit, operation.batches);
      case 'freeze the job process, retry beside it':
        return frozenBesideRetry(this, this.task(operation.task), operation.machine, operation.hit, operation.more, operation.retryFirst);
      case 'relays deliver on their own':
        return this.relaysOnTheirOwn(this.world.tenants[operation.tenant % this.world.tenants.length]!);
      case 'redo published batches':
        return redoPublished(this, this.task(operation.task), operation.batches, operation.changed);
      case 'retry':
        return this.task(operation.task).retry(operation.machine);
      case 'retry beside a zombie':
        return this.task(operation.task).startZombie(operation.machine);
      case 'claim the retry, then a copy claims its number':
        return claimedRetries(this, this.task(operation.task), operation.machine, operation.claim);
      case 'retry elsewhere, then back':
        return this.retryElsewhereThenBack(this.task(operation.task));
      case 'zombie works after its retry':
        return zombieWorks(this, this.task(operation.task), operation.machine, operation.batches, operation.checkpointsOnly, operation.retryFirst, operation.thenBack);
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
        return misspellAndFix(this, this.task(operation.task), operation.retryFirst);
      case "change the checkpoint's schema, then fix it":
        return changeSchemaAndFix(this, this.task(operation.task), operation.machine);
      case 'consume':
        return this.group(operation.group).catchUp(operation.events);
      case 'stop consumer':
        return this.group(operation.group).stop();
      case 'lose consumer machine': {
        const group = this.group(operation.group);
        await group.loseMachine();
        // Every other time a closer loses its machine (derived, so that the seeds' scenarios stay as they
        // were): it rebuilds its triggers' state on the fresh file, and then a re-run publishes a
        // partition it may have fired for again (G22: ignored, or a refresh).
        if (group.kind === 'closer' && ++this.closerLosses % 2 === 0) await this.rebuildThenRerun(group);
        return;
      }
      case 'forward to Airflow':
        return this.forwardToAirflow(operation);
      case 'try a run failed for good again after all': {
        // The task the operation names, or else the first whose run has not succeeded: its run fails for
        // good now if it has not ended (a crashed attempt restarted first), and its failure reaches the
        // server (a fresh machine resumes from what the server holds of it).
        const task = [this.task(operation.task), ...this.tasks].find((candidate) => candidate.outcome !== 'complete');
        if (task === undefined) return;
        if (!task.over) {
          if (!live(task.current) || task.current.ended) await task.retry('same');
          task.end(task.current, 'fail for good');
        }
        if (task.outcome !== 'fail for good') return;
        await this.deliverAll([task.current]);
        // Failed for good, as the checker sees it: nothing held released, one failure for good.
        await this.checker.check();
        await task.triedAgainAfterAll(operation.machine);
        return;
      }
      case "lose a closer's machine after a re-run": {
        // A partition it surely fired for: the re-run's batch, completed, consumed before the loss.
        const group = this.groups.filter((candidate) => candidate.kind === 'closer')[operation.tenant % this.world.tenants.length]!;
        await this.rerunOf(group.tenant);
        await group.catchUp();
        await group.loseMachine();
        return this.rebuildThenRerun(group);
      }
      case 'kill the consumer process': {
        const group = this.group(operation.group);
        await this.workFor(group);
        return group.killedAt(operation.at, operation.hit);
      }
      case 'kill the consumer process after its first delivery, then lose its machine': {
        const group = this.group(operation.group);
        await this.workFor(group);
        return group.killedAfterFirstDeliveryThenLost();
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
      case 'read the console': {
        const [reader, other] = this.twoTenants(operation.tenant, operation.other);
        // One of the reader's own tasks: its run is what the console shows, and its next batch what the long-poll brings.
        const own = this.tasks.filter((task) => task.tenant === reader);
        const task = own[operation.task % own.length]!;
        return readConsole(this.world, reader, other, task, async () => {
          if (!live(task.current) || task.current.ended || task.commit(task.current) === undefined) return false;
          await this.deliverAll([task.current]);
          return true;
        });
      }
      case 'run a BullMQ queue': {
        const queue = new SimQueue(this.world, this.world.tenants[operation.tenant % this.world.tenants.length]!, operation.seed);
        this.queues.push(queue);
        if (!(await queue.run())) this.queues.pop();
        return;
      }
      case 'commit in turn on a shared file':
        return commitInTurn(this, this.world.tenants[operation.tenant % this.world.tenants.length]!);
      case 'hold connections from another address': {
        const task = this.task(operation.task);
        return holdConnections(this.world, async () => {
          if (live(task.current) && !task.current.ended && task.commit(task.current) !== undefined) await this.deliverAll([task.current]);
          for (const tenant of this.world.tenants) {
            const response = await this.world.fetch('/v1/catalog/assets', { headers: { authorization: `Bearer ${tenant.tokens.reader}` } });
            expect('G17', response.status === 200, () => `${tenant.name}'s catalog read answered ${response.status} while a neighbour held connections`);
          }
        });
      }
      case 'release held requests':
        return this.world.proxy.releaseHeld();
      case 'restart server':
        return this.world.restartServer();
      case 'restore the server from an older backup':
        return restoreOlderBackup(this, operation.retries);
      case 'compact':
        // Consumers keep up within the events' retention, as its assumption asks (G15): they catch up first.
        for (const group of this.groups) await group.catchUp();
        if (this.forwarders.length > 0) {
          // The closers' firings reach the server first: the forwarder keeps up with what is stored.
          for (const group of this.groups) await group.drain();
          for (const forwarder of this.forwarders) await forwarder.catchUp();
        }
        await this.checker.check();
        await this.world.compactPast(operation.days);
        return;
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
  async deliverAll(attempts: Attempt[]): Promise<void> {
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
    for (const task of this.tasks) task.endZombie();
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

  /** Work for a group's consumer process: a batch of one of its tenant's tasks, delivered, so that it has events to consume. */
  private async workFor(group: SimGroup): Promise<void> {
    const task = this.tasks.find((candidate) => candidate.tenant === group.tenant && live(candidate.current) && !candidate.current.ended);
    if (task?.commit(task.current) !== undefined) await this.deliverAll([task.current]);
  }

  /** Two different tenants, drawn as indexes: the first, and another. */
  private twoTenants(first: number, second: number): [Tenant, Tenant] {
    const { tenants } = this.world;
    const one = tenants[first % tenants.length]!;
    return [one, tenants[(first + 1 + (second % (tenants.length - 1))) % tenants.length]!];
  }

  /**
   * A run of its own publishes three new partitions of a tenant, its closer's firings reach the server (it
   * catches up and delivers), and its Airflow forwarder forwards them: first as a process killed at a failpoint, Airflow's answer to its first post
   * lost; then in process on the same file or a fresh machine, an answer lost again (G24).
   */
  private async forwardToAirflow(operation: Extract<Operation, { op: 'forward to Airflow' }>): Promise<void> {
    if (!simAirflowAvailable()) {
      this.world.happened('not forwarded (no Airflow)');
      return;
    }
    const tenant = this.world.tenants[operation.tenant % this.world.tenants.length]!;
    // Firings to forward, at least three: a run of its own publishes three partitions no task has and completes.
    await rerunBatches(this.world, tenant, 'forwarded', 3, `rerun-${++this.reruns}`);
    const closer = this.groups.find((group) => group.tenant === tenant && group.kind === 'closer')!;
    await closer.catchUp();
    await closer.drain();
    let forwarder = this.forwarders.find((candidate) => candidate.tenant === tenant);
    if (forwarder === undefined) {
      forwarder = new SimForwarder(this.world, tenant);
      await forwarder.noteStart(this.checker.seen);
      this.forwarders.push(forwarder);
    }
    await forwarder.killedAt(operation.point, operation.hit);
    if (operation.machine === 'fresh') forwarder.loseMachine();
    await forwarder.catchUp();
    await this.checker.check();
    await forwarder.check(this.checker.seen, false);
  }

  /**
   * A closer on a fresh file rebuilds its triggers' state from the server, firing nothing for what it
   * replays; then a re-run publishes a partition it may have fired for again, which it ignores or
   * fires as a refresh, as it was told (G22).
   */
  private async rebuildThenRerun(group: SimGroup): Promise<void> {
    await group.catchUp();
    await this.rerunOf(group.tenant);
    await group.catchUp();
  }

  /** A re-run of the first batch of the tenant's first task, under a run of its own. */
  private async rerunOf(tenant: Tenant): Promise<void> {
    const task = this.tasks.find((candidate) => candidate.tenant === tenant);
    if (task !== undefined) await rerunBatches(this.world, task.tenant, task.name, 1, `rerun-${++this.reruns}`);
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
