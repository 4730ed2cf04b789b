import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { airflowNormalisedUri } from '../../src/airflow/airflow-client.js';
import { REPO } from '../support/child.js';
import { airflowAvailable, airflowSkipReason } from '../support/airflow.js';

/**
 * A map entry by URI is looked up as Airflow stores the asset's URI. The forwarder's normal form is held
 * to Airflow's own (`_sanitize_uri` of the installed Airflow), on the forms a user writes: a scheme in
 * upper case, an empty path, trailing slashes, a query in any order, a fragment, user info.
 */
const seed = Number(process.env.ONCEBOX_SEED ?? 20261202);

const uriArb = fc
  .record({
    scheme: fc.constantFrom('ceo', 'CEO', 'S3', 's3', 'gcs', 'file', 'x-mine', 'Plain'),
    user: fc.constantFrom('', 'me@', 'me:secret@'),
    host: fc.constantFrom('refunds', 'bucket', 'Orders.example', 'h-1'),
    path: fc.array(fc.constantFrom('a', 'B', 'batch_ready', '', 'x.y'), { maxLength: 3 }),
    trailing: fc.constantFrom('', '/', '//'),
    query: fc.array(fc.tuple(fc.constantFrom('a', 'b', 'z'), fc.constantFrom('1', '2', '')), { maxLength: 3 }),
    fragment: fc.constantFrom('', '#top'),
  })
  .map(({ scheme, user, host, path, trailing, query, fragment }) => {
    const pathText = path.length === 0 ? '' : `/${path.join('/')}`;
    const queryText = query.length === 0 ? '' : `?${query.map(([k, v]) => `${k}=${v}`).join('&')}`;
    return `${scheme}://${user}${host}${pathText}${trailing}${queryText}${fragment}`;
  });

describe.skipIf(!airflowAvailable)(`an asset URI as Airflow stores it${airflowSkipReason}`, () => {
  it('is the forwarder’s normal form, for every form a user writes', () => {
    console.log(`URI forms: seed ${seed} (ONCEBOX_SEED=${seed} to replay)`);
    const uris = [...new Set(['ceo://refunds', 'ceo://refunds/', 'CEO://refunds', 's3://bucket/path/', ...fc.sample(uriArb, { numRuns: 300, seed })])];
    const python = join(REPO, '.airflow', 'venv', 'bin', 'python');
    const program = [
      'import json, sys, warnings',
      'warnings.simplefilter("ignore")',
      'from airflow.sdk.definitions.asset import _sanitize_uri',
      'print(json.dumps([_sanitize_uri(u) for u in json.load(sys.stdin)]))',
    ].join('\n');
    const airflows = JSON.parse(execFileSync(python, ['-c', program], { input: JSON.stringify(uris), encoding: 'utf8', timeout: 120_000 })) as string[];
    const differ = uris.map((uri, index) => ({ uri, airflow: airflows[index], ours: airflowNormalisedUri(uri) })).filter((row) => row.airflow !== row.ours);
    expect(differ).toEqual([]);
    expect(airflowNormalisedUri('ceo://refunds')).toBe('ceo://refunds/');
  });
});
