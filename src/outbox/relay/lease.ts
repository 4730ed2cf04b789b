import type Database from 'better-sqlite3';
import { hostname } from 'node:os';
import { sql } from 'kysely';
import { v4 as uuidv4 } from 'uuid';
import { LeaseLostError } from '../../protocol/errors.js';
import { isTransientSqliteError } from '../../sqlite/local-errors.js';
import { params, prepare, prepareConstant, queryBuilder } from '../../sqlite/statements.js';
import type { OutboxFile } from '../file/outbox-file.js';
import type { OutboxSchema } from '../file/schema.js';

export interface LeaseHolder {
  owner: string;
  pid: number;
  host: string;
  expiresAt: number;
}

function prepareLeaseStatements(db: Database.Database) {
  const q = queryBuilder<OutboxSchema>(db);
  const lease = params<{ owner: string; pid: number; host: string; expiresAt: number }>();
  const renewal = params<{ owner: string; expiresAt: number }>();
  const owner = params<{ owner: string }>();
  return {
    getLease: prepareConstant(db, q.selectFrom('lease').select(['owner', 'pid', 'host', 'expires_at']).where('id', '=', sql.lit(1))),
    takeLease: prepare(
      db,
      lease,
      q
        .insertInto('lease')
        .values({ id: sql.lit(1), owner: lease.owner, pid: lease.pid, host: lease.host, expires_at: lease.expiresAt })
        .onConflict((oc) => oc.column('id').doUpdateSet({ owner: lease.owner, pid: lease.pid, host: lease.host, expires_at: lease.expiresAt })),
    ),
    // Renewing is also the proof of holding: it changes no row when another relay took the lease.
    renewLease: prepare(db, renewal, q.updateTable('lease').set({ expires_at: renewal.expiresAt }).where('id', '=', sql.lit(1)).where('owner', '=', renewal.owner)),
    releaseLease: prepare(db, owner, q.deleteFrom('lease').where('id', '=', sql.lit(1)).where('owner', '=', owner.owner)),
  };
}

type LeaseStatements = ReturnType<typeof prepareLeaseStatements>;

// Prepared once per connection: every relay of a file, and its status, share them.
const preparedFor = new WeakMap<Database.Database, LeaseStatements>();

function leaseStatements(file: OutboxFile): LeaseStatements {
  let statements = preparedFor.get(file.db);
  // Stryker disable next-line ConditionalExpression: preparing them again each time reads the same rows, only slower
  if (!statements) preparedFor.set(file.db, (statements = prepareLeaseStatements(file.db)));
  return statements;
}

/** @internal The relay holding the file's lease now, if any (expired or not). */
export function leaseHolder(file: OutboxFile): LeaseHolder | undefined {
  const row = leaseStatements(file).getLease.get();
  return row && { owner: row.owner, pid: row.pid, host: row.host, expiresAt: row.expires_at };
}

/**
 * The right to deliver from one outbox file. Only the holder may mark rows, and it proves it is still
 * the holder inside the very transaction that marks them, so a relay that lost its lease (a paused
 * process whose lease expired and was taken) cannot overwrite what its successor recorded.
 * @internal
 */
export class RelayLease {
  readonly owner = uuidv4();
  private readonly host = hostname();
  private readonly statements: LeaseStatements;

  constructor(
    private readonly file: OutboxFile,
    private readonly ttlMs: number,
    private readonly now: () => number,
  ) {
    this.statements = leaseStatements(file);
  }

  /** Takes the lease if it is free, expired, ours, or held by a process on this host that has died. */
  tryAcquire(): { acquired: true } | { acquired: false; holder: LeaseHolder } {
    const s = this.statements;
    return this.file.db
      .transaction(() => {
        const current = s.getLease.get();
        const now = this.now();
        if (current && current.owner !== this.owner && current.expires_at > now && !this.holderIsDead(current)) {
          return {
            acquired: false as const,
            holder: { owner: current.owner, pid: current.pid, host: current.host, expiresAt: current.expires_at },
          };
        }
        s.takeLease.run({ owner: this.owner, pid: process.pid, host: this.host, expiresAt: now + this.ttlMs });
        return { acquired: true as const };
      })
      .immediate();
  }

  /**
   * Extends the lease; throws LeaseLostError when another relay holds it. Call it inside the
   * transaction that marks rows, so that the check and the marks commit together.
   */
  confirm(): void {
    const renewed = this.statements.renewLease.run({ owner: this.owner, expiresAt: this.now() + this.ttlMs });
    if (renewed.changes === 0) {
      throw new LeaseLostError(
        `${this.file.path}: this relay's lease was taken by another relay; it stops and leaves delivery to the holder`,
      );
    }
  }

  release(): void {
    this.stopRenewing();
    if (this.file.db.open) this.statements.releaseLease.run({ owner: this.owner });
  }

  private renewTimer: NodeJS.Timeout | undefined;

  /**
   * Renews the lease every third of its TTL until released or `stopRenewing()`, so that a relay idle
   * between commits keeps it. A renewal that could not be written (the file busy or full) is tried at
   * the next tick, as the lease is still ours until it expires; any other failure, a lost lease
   * included, goes to `onFatal`.
   */
  keepRenewed(onFatal: (error: unknown) => void): void {
    this.stopRenewing();
    this.renewTimer = setInterval(() => {
      try {
        this.file.db.transaction(() => this.confirm()).immediate();
      } catch (error) {
        if (isTransientSqliteError(error)) return;
        onFatal(error);
      }
    }, Math.max(10, Math.floor(this.ttlMs / 3)));
    this.renewTimer.unref();
  }

  stopRenewing(): void {
    clearInterval(this.renewTimer);
    this.renewTimer = undefined;
  }

  /** A holder on this machine whose process is gone left its lease behind; no need to wait it out. */
  private holderIsDead(holder: { pid: number; host: string }): boolean {
    // Stryker disable next-line ConditionalExpression: this process is alive, so the signal below says so too; the comparison saves the system call
    if (holder.host !== this.host || holder.pid === process.pid) return false;
    try {
      process.kill(holder.pid, 0);
      return false;
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'ESRCH';
    }
  }
}
