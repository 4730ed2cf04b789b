import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createServer } from '../../src/dedupe/index.js';
import { openOutbox, OptionsError, WrongOutboxFileError, type OutboxOptions } from '../../src/outbox/index.js';
import { RUN } from '../support/outbox.js';
import { tempDir } from '../support/temp.js';

describe('options', () => {
  const base = () => ({ path: join(tempDir(), 'o.db'), producer: 'p', server: 'http://127.0.0.1:9', relay: 'manual' as const });

  it.each([
    [{ sever: 'http://x' }, 'sever', 'openOutbox: sever: unknown field; did you mean "server"?'],
    [{ batchMaxRow: 5 }, 'batchMaxRow', 'openOutbox: batchMaxRow: unknown field; did you mean "batchMaxRows"?'],
    [{ run: { ...RUN, runID: 'x' } }, 'run.runID', 'openOutbox: run.runID: unknown field; did you mean "runId"?'],
    [{ run: { ...RUN, attempt: 0 } }, 'run.attempt', 'openOutbox: run.attempt: must be at least 1 (the first try is attempt 1)'],
    // An attempt read from an environment variable, which is text: named as such, with the conversion.
    [{ run: { ...RUN, attempt: '2' } }, 'run.attempt', 'openOutbox: run.attempt: must be a number, not the string "2": convert it, as in Number(process.env.ATTEMPT)'],
    [{ run: { ...RUN, attempt: 2.5 } }, 'run.attempt', 'openOutbox: run.attempt: must be a whole number: the try number, 1 for the first try (got 2.5)'],
    [
      { run: { ...RUN, attempt: 'next' } },
      'run.attempt',
      'openOutbox: run.attempt: must be a number (the try number, 1 for the first try), "claim", or an attempt source with a next(floor) method (got the string "next")',
    ],
    [
      { run: { workflow: 'w', runId: 'r' } },
      'run.attempt',
      'openOutbox: run.attempt: is required: a number (the try number, 1 for the first try), "claim", or an attempt source with a next(floor) method',
    ],
    [{ server: 'ftp://x' }, 'server', 'openOutbox: server: must be an http:// or https:// URL such as "http://127.0.0.1:8787"'],
    [
      { server: undefined, relay: 'in-process' },
      'server',
      "openOutbox: server: is required with relay: 'in-process'; give the server URL, or set relay: 'external' and run `oncebox relay`",
    ],
    [{ durability: 'off' }, 'durability', 'openOutbox: durability: Invalid option: expected one of "full"|"normal"'],
    [{ run: { ...RUN, runId: 'r\u0000' } }, 'run.runId', 'openOutbox: run.runId: must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters'],
    [{ producer: 'p\ud83d' }, 'producer', 'openOutbox: producer: must be well-formed Unicode without NUL (\\u0000) or unpaired surrogate halves; remove or replace those characters'],
  ])('refuse %j with a message that names it', async (override, field, message) => {
    const opening = openOutbox({ ...base(), ...override } as OutboxOptions);
    await expect(opening).rejects.toBeInstanceOf(OptionsError);
    await expect(opening).rejects.toMatchObject({ code: 'invalid_option', field, message });
  });

  it('refuse a misspelt server option', async () => {
    await expect(createServer({ db: join(tempDir(), 's.db'), asset: ['x'] } as never)).rejects.toMatchObject({
      code: 'invalid_option',
      message: 'createServer: asset: unknown field; did you mean "assets"?',
    });
  });

  it('refuse a stale time outside a minute to ten years, which would make the catalog answer no date', async () => {
    for (const [staleRunAfterMs, message] of [
      [59_999, 'createServer: staleRunAfterMs: must be at least 60000 (one minute)'],
      [2_500_000_001 * 3600_000, 'createServer: staleRunAfterMs: must be at most 315360000000 (ten years)'],
    ] as const) {
      await expect(createServer({ db: join(tempDir(), 's.db'), staleRunAfterMs })).rejects.toMatchObject({ code: 'invalid_option', message });
    }
  });

  it('refuse a file that belongs to another producer', async () => {
    const options = base();
    await (await openOutbox(options)).close();
    const opening = openOutbox({ ...options, producer: 'other' });
    await expect(opening).rejects.toBeInstanceOf(WrongOutboxFileError);
    await expect(opening).rejects.toMatchObject({
      message: `${options.path}: this outbox belongs to producer "p", not "other"; give each producer its own file`,
    });
  });
});
