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

/** Characters that turn the direction of the text after them: U+202A–U+202E and U+2066–U+2069. */
const DIRECTION_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/g;

/**
 * A server's sentence as the console shows it: the sentence may repeat a value the user sent (a run id
 * in a link), and a direction control in that value would turn the sentence's own words after it; each
 * is shown as its code point instead, where the user can see it.
 */
export function withVisibleControls(text: string): string {
  return text.replace(DIRECTION_CONTROLS, (control) => `<U+${control.codePointAt(0)!.toString(16).toUpperCase()}>`);
}
