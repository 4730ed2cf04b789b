import type { Checker } from './checker.js';
import type { SimForwarder } from './forwarding.js';
import type { SimGroup } from './groups.js';
import type { Attempt, SimTask } from './jobs.js';
import type { World } from './world.js';

/**
 * What an operation of several steps works with: the world, its tasks and groups, the checker, and a way
 * to deliver attempts' rows without faults (the scenario steps relays by hand).
 */
export interface Scene {
  readonly world: World;
  readonly tasks: readonly SimTask[];
  readonly groups: readonly SimGroup[];
  /** The tenants' Airflow forwarders started so far. */
  readonly forwarders: readonly SimForwarder[];
  readonly checker: Checker;
  deliverAll(attempts: Attempt[]): Promise<void>;
}
