/** What broke, in words: the guarantee, and what the history or an answer showed. */
export class Violation extends Error {
  constructor(
    readonly guarantee: string,
    message: string,
  ) {
    super(`${guarantee}: ${message}`);
  }
}

/** Throws a Violation of `guarantee` unless `holds`; the message is built only then. */
export function expect(guarantee: string, holds: boolean, message: () => string): void {
  if (!holds) throw new Violation(guarantee, message());
}
