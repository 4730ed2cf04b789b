/** Defaults shared by producer and server, so that what a producer accepts at commit the server accepts too. */
export const Limits = {
  /** Largest `extra`, as UTF-8 bytes of its JSON. */
  maxExtraBytes: 64 * 1024,
  /** Deepest nesting of arrays and objects inside `extra`. */
  maxExtraDepth: 32,
  maxAssetNameLength: 200,
  maxPartitionKeyLength: 512,
  maxNameLength: 200,
  /** Items in one `POST /v1/emissions`. */
  maxBatchItems: 1000,
  /** Deepest nesting of a request body: extra's own 32 levels inside the envelope, with room to spare. */
  maxBodyDepth: 64,
  /**
   * Checkpoint names of one stream (a run's task), the producer's own `oncebox.held` included: what a
   * stream's state answers stays small, and one value per name is all a resume reads.
   */
  maxCheckpointNames: 64,
  /**
   * Assets one consumer group consumes (its `oncebox.assets` checkpoint): the server counts a group's lag
   * over each, so a longer list is refused where it is written, by the consumer at open and by the server.
   */
  maxGroupAssets: 100,
  /** Bytes of one request body. Must fit maxBatchItems items of ordinary size. */
  maxBodyBytes: 8 * 1024 * 1024,
} as const;
