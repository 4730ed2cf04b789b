/** How long ago an ISO time was, in words a person scans: "12 s ago", "3 min ago", "2 h ago", "4 d ago". */
export function ago(iso: string | null, now = Date.now()): string {
  if (iso === null) return 'never';
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86_400)} d ago`;
}

/** A stream as people name it: producer/run, and /task when it has one. */
export function streamName(stream: { producer: string; runId: string; task: string | null }): string {
  return `${stream.producer}/${stream.runId}${stream.task === null ? '' : `/${stream.task}`}`;
}

export function count(n: number): string {
  return n.toLocaleString('en-US');
}
