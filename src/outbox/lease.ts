import { hostname } from 'node:os';
import { v4 as uuidv4 } from 'uuid';
import { LeaseLostError } from '../protocol/errors.js';
import type { OutboxFile } from './outbox-file.js';

export interface LeaseHolder {
  owner: string;
  pid: number;
  host: string;
  expiresAt: number;
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

  constructor(
    private readonly file: OutboxFile,
    private readonly ttlMs: number,
    private readonly now: () => number,
  ) {}

  /** Takes the lease if it is free, expired, ours, or held by a process on this host that has died. */
  tryAcquire(): { acquired: true } | { acquired: false; holder: LeaseHolder } {
    const s = this.file.statements;
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
    const renewed = this.file.statements.renewLease.run({ owner: this.owner, expiresAt: this.now() + this.ttlMs });
    if (renewed.changes === 0) {
      throw new LeaseLostError(
        `${this.file.path}: this relay's lease was taken by another relay; it stops and leaves delivery to the holder`,
      );
    }
  }

  release(): void {
    if (this.file.db.open) this.file.statements.releaseLease.run({ owner: this.owner });
  }

  /** A holder on this machine whose process is gone left its lease behind; no need to wait it out. */
  private holderIsDead(holder: { pid: number; host: string }): boolean {
    if (holder.host !== this.host || holder.pid === process.pid) return false;
    try {
      process.kill(holder.pid, 0);
      return false;
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'ESRCH';
    }
  }
}
