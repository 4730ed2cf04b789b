import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LeaseLostError } from '../../src/outbox/index.js';
import { RelayLease } from '../../src/outbox/relay/lease.js';
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

  it('keeps itself renewed while held, rides out a busy file, and hands a lost lease to onFatal', async () => {
    const { file } = setup();
    const lease = new RelayLease(file, 30, () => clock);
    expect(lease.tryAcquire()).toMatchObject({ acquired: true });
    const fatal: unknown[] = [];
    lease.keepRenewed((error) => fatal.push(error));
    const expiresAt = () => Number(holderRow(file)!.expires_at);
    const start = expiresAt();
    clock += 1000;
    await new Promise((resolve) => setTimeout(resolve, 60));
    // Renewed every third of its TTL (10 ms): it now runs from the clock's new time.
    expect(expiresAt()).toBe(clock + 30);
    expect(expiresAt()).toBeGreaterThan(start);
    // Another connection holds the write lock: a renewal cannot be written, and is tried again later.
    // (The file would wait 5 s for the lock, blocking this thread, where the lock's holder is too.)
    file.db.pragma('busy_timeout = 0');
    const other = new Database(file.path);
    other.exec('BEGIN IMMEDIATE');
    clock += 1000;
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(fatal).toEqual([]);
    other.exec('COMMIT');
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(expiresAt()).toBe(clock + 30);
    // Another relay took it: the next renewal fails for good, and says why.
    plantHolder(file, { pid: 1, host: 'elsewhere', expiresAt: clock + 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(fatal[0]).toBeInstanceOf(LeaseLostError);
    lease.stopRenewing();
    other.close();
  });
});
