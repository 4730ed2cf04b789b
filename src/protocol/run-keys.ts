/*
 * Which items of an emission batch carry keys of the stream's run alone (docs/protocol.md, "Run keys").
 * Said in a request header rather than in the items, because a server from before it ignores a header it
 * does not know, where it refuses an item with a field it does not know: a relay of this version may talk
 * to an older server, or to a mix of both behind one address, and lose nothing.
 */

/** The request header of `POST /v1/emissions` that lists the items whose keys are the run's alone. */
export const RUN_KEYS_HEADER = 'oncebox-run-keys';

/** Longest header value the server reads: a batch's 1,000 items fit many times over as ranges. */
const MAX_LENGTH = 8192;

/**
 * The header's value for these item positions (0-based, ascending): comma-separated ranges, `0-499` or
 * `3`, so that a batch of partition emissions costs a few bytes. Undefined for none.
 */
export function encodeRunKeys(positions: readonly number[]): string | undefined {
  const ranges: string[] = [];
  for (let i = 0; i < positions.length; ) {
    let j = i;
    while (j + 1 < positions.length && positions[j + 1] === positions[j]! + 1) j++;
    ranges.push(i === j ? String(positions[i]) : `${positions[i]}-${positions[j]}`);
    i = j + 1;
  }
  return ranges.length === 0 ? undefined : ranges.join(',');
}

/**
 * The item positions the header lists, below `itemCount`; or why it cannot be read at all (for a 400: a
 * header that is not the relay's is the client's mistake, said rather than guessed at). Positions past
 * the batch, and a range that goes backwards, name no item and change nothing: a hint about keys that
 * are not there is ignored, as the header itself is by an older server.
 */
export function parseRunKeys(value: string, itemCount: number): { positions: Set<number> } | { problem: string } {
  if (value.length > MAX_LENGTH) return { problem: `must be at most ${MAX_LENGTH} characters` };
  const positions = new Set<number>();
  for (const part of value.split(',')) {
    const range = /^\s*(\d{1,4})(?:-(\d{1,4}))?\s*$/.exec(part);
    if (!range) return { problem: 'must be item positions and ranges, e.g. "0-499" or "0,2,5-9"' };
    const first = Number(range[1]);
    // Clamped to the batch, so that a long header of wide ranges costs at most the batch's size each.
    const last = Math.min(range[2] === undefined ? first : Number(range[2]), itemCount - 1);
    for (let position = first; position <= last; position++) positions.add(position);
  }
  return { positions };
}
