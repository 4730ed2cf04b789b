/**
 * True when A and B are the same type, with the same keys (an optional property that one of them lacks
 * would still let each be assigned to the other). A documented interface and the zod schema that
 * validates it are tied with it (`const check: Same<Interface, z.input<typeof schema>> = true`), so
 * that neither can change without the other.
 * @internal
 */
export type Same<A, B> = [A] extends [B]
  ? [B] extends [A]
    ? [keyof A] extends [keyof B]
      ? [keyof B] extends [keyof A]
        ? true
        : false
      : false
    : false
  : false;
