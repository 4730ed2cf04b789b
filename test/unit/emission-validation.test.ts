import { describe, expect, it } from 'vitest';
import { EmissionValidationError, type EmissionInput } from '../../src/outbox/index.js';
import { testOutbox } from '../support/outbox.js';

/** Every rule an emission is checked against at commit, with the exact message a user reads. */
const cases: [string, unknown, string, string][] = [
  ['empty partition key', { partitionKey: '' }, 'partitionKey', 'partitionKey: must not be empty; leave it out for an event without a partition'],
  ['partition key of the wrong type', { partitionKey: 42 }, 'partitionKey', 'partitionKey: must be a string such as "batch-0042"'],
  ['partition key too long', { partitionKey: 'x'.repeat(513) }, 'partitionKey', 'partitionKey: must be at most 512 characters; use a shorter partition key'],
  ['date without key', { partitionDate: '2026-11-30T00:00:00Z' }, 'partitionDate', 'partitionDate: requires partitionKey; give the partition key this date belongs to'],
  ['date without time', { partitionKey: 'b', partitionDate: '2026-11-30' }, 'partitionDate', 'partitionDate: must be an ISO 8601 date-time with an explicit offset or Z, e.g. "2026-11-30T00:00:00Z" (got "2026-11-30")'],
  ['date without offset', { partitionKey: 'b', partitionDate: '2026-11-30T00:00:00' }, 'partitionDate', 'partitionDate: must be an ISO 8601 date-time with an explicit offset or Z, e.g. "2026-11-30T00:00:00Z" (got "2026-11-30T00:00:00")'],
  ['date that does not exist', { partitionKey: 'b', partitionDate: '2026-02-30T00:00:00+01:00' }, 'partitionDate', 'partitionDate: must be an ISO 8601 date-time with an explicit offset or Z, e.g. "2026-11-30T00:00:00Z" (got "2026-02-30T00:00:00+01:00")'],
  ['extra that is an array', { extra: [1] }, 'extra', 'extra: must be a JSON object such as { "rows": 1200 }'],
  ['extra with NaN', { extra: { rows: Number.NaN } }, 'extra.rows', 'extra.rows: is NaN, which JSON cannot hold; use null or a string'],
  ['extra with Infinity', { extra: { rows: Number.POSITIVE_INFINITY } }, 'extra.rows', 'extra.rows: is Infinity, which JSON cannot hold; use null or a string'],
  ['extra with a Date', { extra: { when: new Date(0) } }, 'extra.when', 'extra.when: is a Date, not a plain object; convert it (a Date to an ISO string, say)'],
  ['extra with a function', { extra: { f: () => 1 } }, 'extra.f', 'extra.f: is a function, which JSON cannot hold; leave it out or convert it to a string'],
  ['extra with a bigint', { extra: { n: 1n } }, 'extra.n', 'extra.n: is a bigint, which JSON cannot hold; leave it out or convert it to a string'],
  ['extra with undefined deep inside', { extra: { a: [1, { b: undefined }] } }, 'extra.a[1].b', 'extra.a[1].b: is undefined, which JSON cannot hold; leave the field out or use null'],
  ['extra with a __proto__ key', { extra: JSON.parse('{"__proto__":{"x":1}}') }, 'extra.__proto__', 'extra.__proto__: is a reserved key; rename it'],
  ['extra over 64 KiB', { extra: { big: 'x'.repeat(70_000) } }, 'extra', 'extra: must be at most 65536 bytes as JSON (got 70010); keep large data elsewhere and put a reference to it in extra'],
  ['extra nested too deep', { extra: JSON.parse('{"a":'.repeat(40) + '1' + '}'.repeat(40)) }, `extra${'.a'.repeat(32)}`, `extra${'.a'.repeat(32)}: nests deeper than 32 levels; flatten it`],
  ['partition key with NUL', { partitionKey: 'batch\u0000' }, 'partitionKey', 'partitionKey: must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters'],
  ['partition key with a lone surrogate', { partitionKey: 'batch-\ud800' }, 'partitionKey', 'partitionKey: must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters'],
  ['extra with NUL in a value', { extra: { note: ['ok', 'a\u0000b'] } }, 'extra.note[1]', 'extra.note[1]: must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters'],
  ['extra with a lone surrogate in a key', { extra: { ['k\udc00']: 1 } }, 'extra."k\ufffd"', 'extra."k\ufffd": key must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters'],
  ['misspelt field', { partitonKey: 'b' }, 'partitonKey', 'partitonKey: unknown field; did you mean "partitionKey"?'],
  ['asset given in the emission', { asset: 'other' }, 'asset', 'asset: unknown field here; the asset is the one emit() is called on (box.asset(name))'],
  ['empty explicit key', { key: '' }, 'key', 'key: must not be empty'],
  ['not an object', null, 'emission', 'emission: must be an object such as { partitionKey: "batch-0042" }'],
];

describe('emission validation at commit', () => {
  it.each(cases)('refuses %s, naming the field', async (_name, input, field, message) => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    const error = catchError(() => box.commit((tx) => tx.emit(asset, input as EmissionInput)));
    expect(error).toBeInstanceOf(EmissionValidationError);
    expect(error).toMatchObject({ code: 'invalid_emission', field, message });
    expect(box.status()).toMatchObject({ pending: 0, delivered: 0, dead: 0 });
  });

  it('accepts the largest extra that fits and a date with an offset', async () => {
    const box = await testOutbox();
    const asset = box.asset('batch_ready');
    const fits = { big: 'x'.repeat(65_536 - '{"big":""}'.length) };
    box.commit((tx) => tx.emit(asset, { partitionKey: 'b1', partitionDate: '2026-11-30T23:59:59.123+05:30', extra: fits }));
    expect(box.status().pending).toBe(1);
  });

  it('applies a lower maxExtraBytes when one is set', async () => {
    const box = await testOutbox({ maxExtraBytes: 100 });
    const error = catchError(() => box.commit((tx) => tx.emit(box.asset('batch_ready'), { extra: { s: 'x'.repeat(200) } })));
    expect(error).toMatchObject({ field: 'extra', message: 'extra: must be at most 100 bytes as JSON (got 208); keep large data elsewhere and put a reference to it in extra' });
  });

  it.each([
    ['', 'asset: must not be empty; give the name of a registered asset such as "batch_ready"'],
    ['bad name', 'asset: must start with a letter or digit and use only letters, digits and _ . : / @ + -'],
    ['x'.repeat(201), 'asset: must be at most 200 characters; use a shorter asset name'],
  ])('refuses the asset name %j', async (name, message) => {
    const box = await testOutbox();
    expect(catchError(() => box.asset(name))).toMatchObject({ code: 'invalid_emission', field: 'asset', message });
  });
});

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected an error');
}
