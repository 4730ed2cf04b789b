import { elementScroll, observeElementOffset, observeElementRect, Virtualizer } from '@tanstack/virtual-core';
import { useLayoutEffect, useReducer, useState } from 'preact/hooks';

/**
 * Rows of a long list rendered only where the reader looks: TanStack Virtual's core, bound to Preact.
 * Ten thousand partitions cost the DOM a screenful of rows.
 */
export function useVirtualRows(count: number, scrollElement: () => HTMLElement | null, rowHeight: number): Virtualizer<HTMLElement, Element> {
  const [, render] = useReducer((n: number) => n + 1, 0);
  const options = {
    count,
    getScrollElement: scrollElement,
    estimateSize: () => rowHeight,
    overscan: 12,
    scrollToFn: elementScroll,
    observeElementRect,
    observeElementOffset,
    onChange: () => render(undefined),
  };
  const [virtualizer] = useState(() => new Virtualizer<HTMLElement, Element>(options));
  virtualizer.setOptions({ ...virtualizer.options, ...options });
  useLayoutEffect(() => virtualizer._didMount(), [virtualizer]);
  useLayoutEffect(() => virtualizer._willUpdate());
  return virtualizer;
}
