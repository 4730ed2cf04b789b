/**
 * Named crash points for the crash tests: `ONCEBOX_FAILPOINT=commit:after-write@3` kills this process
 * with SIGKILL the third time it reaches `commit:after-write`. With the variable unset (always, outside
 * tests) a failpoint is one comparison.
 *
 * - `commit:after-write`: inside the commit's SQLite transaction, every row written, not yet committed.
 * - `commit:after-commit`: the commit is durable; the relay has not been woken.
 * - `relay:after-response`: the server has stored the batch and answered; no receipt is recorded yet.
 * - `consume:before-handler`: a consumer fetched events and is about to hand them to its handler.
 * - `consume:after-commit`: a consumer committed an event's effect and cursor; the relay may be delivering.
 * - `forward:before-post`: the Airflow forwarder is about to post an event it found no trace of.
 * - `forward:after-post`: Airflow committed a forwarded event and answered; its receipt is not yet committed.
 * @internal
 */
export type FailpointName =
  | 'commit:after-write'
  | 'commit:after-commit'
  | 'relay:after-response'
  | 'consume:before-handler'
  | 'consume:after-commit'
  | 'forward:before-post'
  | 'forward:after-post';

const armed = parse(process.env.ONCEBOX_FAILPOINT);
let hits = 0;

export function failpoint(name: FailpointName): void {
  if (armed === undefined || armed.name !== name) return;
  hits++;
  if (hits === armed.hit) process.kill(process.pid, 'SIGKILL');
}

function parse(spec: string | undefined): { name: string; hit: number } | undefined {
  if (!spec) return undefined;
  const [name, hit] = spec.split('@');
  return { name: name!, hit: hit === undefined ? 1 : Number(hit) };
}
