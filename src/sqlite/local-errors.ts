/**
 * SQLite errors that say nothing is wrong with the data, only with the moment: the disk is full, another
 * connection holds the lock past the busy timeout, or an I/O call failed. Whatever was being written can
 * be written again once the cause is gone, so the relay backs off and tries again instead of stopping.
 * @internal
 */
export function isTransientSqliteError(error: unknown): error is Error & { code: string } {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^SQLITE_(FULL|BUSY|LOCKED|IOERR|PROTOCOL)/.test(code);
}
