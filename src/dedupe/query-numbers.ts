/**
 * The numbers of a query string, as the protocol writes them: plain digits for a whole number (a
 * cursor, a limit), and for a fraction a JSON number (`2.5`, or `2.5e-1` as any OpenAPI client may write
 * a number; schemathesis found one refused). A number schema coerces more (`0x10`, ` 5`, an empty value
 * as 0), which would let a typo read as another cursor; those are refused before the schema sees them.
 */
const WHOLE = /^\d+$/;
const DECIMAL = /^\d+(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

/** The first query parameter of these that is not written as the protocol writes numbers, and how it should be. */
export function malformedQueryNumber(
  query: unknown,
  { whole, decimal = [] }: { whole: readonly string[]; decimal?: readonly string[] },
): { field: string; message: string } | undefined {
  if (typeof query !== 'object' || query === null) return undefined;
  const given = query as Record<string, unknown>;
  for (const [names, pattern, how] of [
    [whole, WHOLE, 'a whole number in plain digits'],
    [decimal, DECIMAL, 'a number in plain digits (such as 5, 2.5 or 2.5e-1)'],
  ] as const) {
    for (const name of names) {
      const value = given[name];
      if (typeof value === 'string' && !pattern.test(value)) return { field: name, message: `${name}: must be ${how}` };
    }
  }
  return undefined;
}
