import type { OutboxLogger } from './logger.js';

/**
 * The failure a retrying loop is living through: logged once per cause (not once per retry), kept for
 * `status()`, and logged once more when the loop gets through again.
 * @internal
 */
export class FailureStreak {
  private current: string | null = null;

  constructor(
    private readonly logger: OutboxLogger,
    private readonly fields: Record<string, unknown>,
  ) {}

  /** The message of the failure in progress; null once the loop gets through. */
  get lastError(): string | null {
    return this.current;
  }

  failed(code: string, message: string): void {
    if (this.current !== message) this.logger.warn({ code, ...this.fields }, message);
    this.current = message;
  }

  recovered(code: string, message: string): void {
    if (this.current === null) return;
    this.logger.info({ code, ...this.fields }, message);
    this.current = null;
  }
}
