import type { Receipt } from '../protocol/wire.js';
import type { CommitTransaction } from './commit/commit.js';
import type { Emission, EmissionInput } from './commit/emission.js';

/** A registered asset, as the producer names it. */
export class Asset {
  /** @internal */
  constructor(
    readonly name: string,
    private readonly commit: (fn: (tx: CommitTransaction) => Emission) => Emission,
  ) {}

  /**
   * Commits one emission on its own and resolves with the server's receipt once it is delivered. The
   * emission is durable when this returns a promise: awaiting it only waits for delivery.
   */
  emit(input: EmissionInput = {}): Promise<Receipt> {
    let emission: Emission;
    try {
      emission = this.commit((tx) => tx.emit(this, input));
    } catch (error) {
      return Promise.reject(error);
    }
    return emission.receipt();
  }
}
