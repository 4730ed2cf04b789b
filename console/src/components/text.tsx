/**
 * Text a job or a person wrote (a name, a partition key, a message), of any length and direction the
 * server takes: isolated from the page's own direction, so that an unclosed right-to-left override in a
 * partition key ends with it and never turns the console's words around it; cut with an ellipsis where
 * its box ends, and whole on hover. `wrap` lets a message wrap instead, breaking anywhere.
 */
export function Text({ value, wrap = false }: { value: string; wrap?: boolean }) {
  return (
    <bdi class={wrap ? 'text wrap' : 'text'} dir="auto" title={value}>
      {value}
    </bdi>
  );
}
