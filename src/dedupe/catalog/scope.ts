/** The catalog's lists: what a reader may see of them, and how it pages through them. A leaf, for every list's module. */

/** What the reader's token lets it see: the catalog is no more public than the events and streams. */
export interface CatalogScope {
  /** The assets it may read; null for every asset. */
  assets: readonly string[] | null;
  /** The producers whose streams it may read: a name, a prefix ending in `*`, or `*`. */
  producers: string;
}

export interface PageQuery {
  after?: string | undefined;
  limit: number;
  /** The most bytes of items the page may hold: PAGE_BYTES unless a caller shares that among lists. */
  maxBytes?: number | undefined;
}
