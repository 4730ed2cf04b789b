import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LeaseLostError } from '../../src/outbox/index.js';
import { leaseHolder, RelayLease } from '../../src/outbox/relay/lease.js';
import { OutboxFile } from '../../src/outbox/file/outbox-file.js';
import { tempDir } from '../support/temp.js';

/** The relay lease (src/outbox/relay/lease.ts) on a real file, with a clock of the test's own. */
const files: OutboxFile[] = [];
afterEach(() => {
  for (const file of files.splice(0)) file.close();
});

const TTL = 1000;
let clock = 1_000_000;

function setup() {
  const file = new OutboxFile(join(tempDir(), 'outbox.db'), 'normal');
  files.push(file);
  return { file, lease: () => new RelayLease(file, TTL, () => clock) };
}

const holderRow = (file: OutboxFile) => file.db.prepare('SELECT owner, pid, host, expires_at FROM lease').get() as Record<string, unknown> | undefined;

/** A lease row as another process left it. */
function plantHolder(file: OutboxFile, holder: { pid: number; host: string; expiresAt: number }) {
  file.db.prepare("INSERT OR REPLACE INTO lease (id, owner, pid, host, expires_at) VALUES (1, 'other-owner', ?, ?, ?)").run(holder.pid, holder.host, holder.expiresAt);
}

/** The pid of a process that has exited. */
const deadPid = () => spawnSync(process.execPath, ['-e', '0']).pid!;

describe('the relay lease', () => {
  it('is taken when free, for ttl from now, with this process as holder', () => {
    const { file, lease } = setup();
    const a = lease();
    expect(a.tryAcquire()).toEqual({ acquired: true });
    expect(holderRow(file)).toEqual({ owner: a.owner, pid: process.pid, host: hostname(), expires_at: clock + TTL });
  });

  it('is refused to a second relay while the holder is alive and its lease runs, up to the last millisecond', () => {
    const { lease } = setup();
    const a = lease();
    a.tryAcquire();
    clock += TTL - 1;
    expect(lease().tryAcquire()).toEqual({
      acquired: false,
      holder: { owner: a.owner, pid: process.pid, host: hostname(), expiresAt: clock + 1 },
    });
    clock += 1; // the lease has run out exactly now
    expect(lease().tryAcquire()).toEqual({ acquired: true });
  });

  it('is taken again by its holder, and renewed by confirm, which proves it is held', () => {
    const { file, lease } = setup();
    const a = lease();
    a.tryAcquire();
    clock += 10;
    expect(a.tryAcquire()).toEqual({ acquired: true });
    clock += 10;
    a.confirm();
    expect(holderRow(file)?.expires_at).toBe(clock + TTL);
  });

  it('cannot be confirmed once another relay took it, and says so', () => {
    const { file, lease } = setup();
    const a = lease();
    a.tryAcquire();
    clock += TTL;
    lease().tryAcquire();
    expect(() => a.confirm()).toThrow(LeaseLostError);
    expect(() => a.confirm()).toThrow(`${file.path}: this relay's lease was taken by another relay; it stops and leaves delivery to the holder`);
  });

  it('is released only by its holder, and release after the file closed does nothing', () => {
    const { file, lease } = setup();
    const a = lease();
    a.tryAcquire();
    lease().release();
    expect(holderRow(file)?.owner).toBe(a.owner);
    a.release();
    expect(holderRow(file)).toBeUndefined();
    file.close();
    expect(() => a.release()).not.toThrow();
  });

  it('is taken at once from a dead process on this host, but not from a live one, one of this process, or one elsewhere', () => {
    const { file, lease } = setup();
    const later = clock + TTL;
    plantHolder(file, { pid: deadPid(), host: 'another-host', expiresAt: later });
    expect(lease().tryAcquire()).toMatchObject({ acquired: false });
    plantHolder(file, { pid: process.pid, host: hostname(), expiresAt: later });
    expect(lease().tryAcquire()).toMatchObject({ acquired: false });
    plantHolder(file, { pid: process.ppid, host: hostname(), expiresAt: later });
    expect(lease().tryAcquire()).toMatchObject({ acquired: false });
    plantHolder(file, { pid: deadPid(), host: hostname(), expiresAt: later });
    expect(lease().tryAcquire()).toEqual({ acquired: true });
  });

  it('is not taken from a process of another user on this host, which signalling cannot reach (EPERM)', () => {
    const { file, lease } = setup();
    plantHolder(file, { pid: 424242, host: hostname(), expiresAt: clock + TTL });
    // Tests run as root, for whom no process is out of reach: the operating system's answer is stood in for.
    const kill = vi.spyOn(process, 'kill').mockImplementation(() => {
      throw Object.assign(new Error('kill EPERM'), { code: 'EPERM' });
    });
    try {
      expect(lease().tryAcquire()).toMatchObject({ acquired: false });
    } finally {
      kill.mockRestore();
    }
  });

  it('keeps itself renewed every third of its TTL while held, rides out a busy file, hands a lost lease to onFatal, and stops when told', () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const { file } = setup();
      const lease = new RelayLease(file, 300, () => clock);
      expect(lease.tryAcquire()).toMatchObject({ acquired: true });
      expect(leaseHolder(file)).toEqual({ owner: expect.any(String), pid: process.pid, host: hostname(), expiresAt: clock + 300 });
      const fatal: unknown[] = [];
      lease.keepRenewed((error) => fatal.push(error));
      const expiresAt = () => leaseHolder(file)!.expiresAt;
      clock += 1000;
      vi.advanceTimersByTime(99);
      expect(expiresAt()).toBe(clock - 1000 + 300);
      vi.advanceTimersByTime(1);
      // Renewed a third of its TTL (100 ms) later: it now runs from the clock's new time.
      expect(expiresAt()).toBe(clock + 300);
      // Another connection holds the write lock: a renewal cannot be written, and is tried again at the next tick.
      file.db.pragma('busy_timeout = 0');
      const other = new Database(file.path);
      other.exec('BEGIN IMMEDIATE');
      clock += 1000;
      vi.advanceTimersByTime(100);
      expect(fatal).toEqual([]);
      other.exec('COMMIT');
      other.close();
      vi.advanceTimersByTime(100);
      expect(expiresAt()).toBe(clock + 300);
      // Stopped: no renewal any more.
      lease.stopRenewing();
      clock += 1000;
      vi.advanceTimersByTime(1000);
      expect(expiresAt()).toBe(clock - 1000 + 300);
      // Renewing again, then another relay takes it: the next renewal fails for good, and says why.
      lease.keepRenewed((error) => fatal.push(error));
      plantHolder(file, { pid: 1, host: 'elsewhere', expiresAt: clock + 10_000 });
      vi.advanceTimersByTime(100);
      expect(fatal).toHaveLength(1);
      expect(fatal[0]).toBeInstanceOf(LeaseLostError);
      lease.stopRenewing();
      // A file nobody holds has no holder.
      file.db.prepare('DELETE FROM lease').run();
      expect(leaseHolder(file)).toBeUndefined();
    } finally {
      vi.useRealTimers();
    }
  });
});
