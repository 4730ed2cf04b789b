import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renewalTime } from '../../src/airflow/airflow-client.js';
import { partitionKeyProblem } from '../../src/airflow/event-body.js';
import { assetEventBody, forwardedKey, parseAssetMap, readAssetMap } from '../../src/airflow/index.js';
import { airflowCredentials } from '../../src/cli/forward-command.js';
import type { StoredEvent } from '../../src/protocol/wire.js';
import { tempDir } from '../support/temp.js';

const jwt = (payload: object) => `h.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.s`;

describe('the Airflow token renewal time', () => {
  const now = 1_000_000_000_000;
  it('is a minute before expiry for a long-lived token', () => {
    expect(renewalTime(jwt({ exp: now / 1000 + 3600 }), now, 60_000)).toBe(now + 3600_000 - 60_000);
  });
  it('is halfway through the life of a token shorter than twice the margin', () => {
    expect(renewalTime(jwt({ exp: now / 1000 + 8 }), now, 60_000)).toBe(now + 4000);
  });
  it('is now for a token expired already', () => {
    expect(renewalTime(jwt({ exp: now / 1000 - 10 }), now, 60_000)).toBe(now);
  });
  it('is never for a token without a readable exp: it is kept until Airflow refuses it', () => {
    expect(renewalTime(jwt({ sub: 'x' }), now, 60_000)).toBe(Number.POSITIVE_INFINITY);
    expect(renewalTime('not-a-jwt', now, 60_000)).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('the asset map', () => {
  it('takes names, URIs and bare names', () => {
    expect(parseAssetMap({ a: 'x', b: { name: 'y' }, c: { uri: 's3://z' } })).toEqual({ a: 'x', b: { name: 'y' }, c: { uri: 's3://z' } });
  });
  it('names the entry at fault', () => {
    expect(() => parseAssetMap({ a: { nme: 'x' } })).toThrow(expect.objectContaining({ code: 'airflow_invalid_map', field: 'a' }));
    expect(() => parseAssetMap({ a: { nme: 'x' } })).toThrow('must be an Airflow asset name, { "name": "…" } or { "uri": "…" }');
    expect(() => parseAssetMap({})).toThrow('must map at least one oncebox asset to an Airflow asset');
    expect(() => parseAssetMap({ a: '' })).toThrow(expect.objectContaining({ field: 'a' }));
  });
  it('names the file when it cannot be read or is not JSON', () => {
    const dir = tempDir();
    expect(() => readAssetMap(join(dir, 'missing.json'))).toThrow(`cannot read the asset map ${join(dir, 'missing.json')}`);
    writeFileSync(join(dir, 'bad.json'), '{ batch_ready: x }');
    expect(() => readAssetMap(join(dir, 'bad.json'))).toThrow(expect.objectContaining({ code: 'airflow_invalid_map', message: expect.stringContaining('is not JSON') }));
    writeFileSync(join(dir, 'good.json'), '{ "batch_ready": "oncebox_batches" }');
    expect(readAssetMap(join(dir, 'good.json'))).toEqual({ batch_ready: 'oncebox_batches' });
  });
});

describe('the forwarder credentials', () => {
  it('come from the environment: a user and password first, else a token', () => {
    expect(airflowCredentials(undefined, { ONCEBOX_AIRFLOW_USERNAME: 'u', ONCEBOX_AIRFLOW_PASSWORD: 'p', ONCEBOX_AIRFLOW_TOKEN: 't' })).toEqual({ username: 'u', password: 'p' });
    expect(airflowCredentials(undefined, { ONCEBOX_AIRFLOW_TOKEN: 't' })).toEqual({ token: 't' });
  });
  it('come from a file, which wins over the environment', () => {
    const file = join(tempDir(), 'airflow.json');
    writeFileSync(file, JSON.stringify({ username: 'f', password: 'q' }));
    expect(airflowCredentials(file, { ONCEBOX_AIRFLOW_TOKEN: 't' })).toEqual({ username: 'f', password: 'q' });
    writeFileSync(file, JSON.stringify({ user: 'f' }));
    expect(() => airflowCredentials(file, {})).toThrow('must hold {"username": "…", "password": "…"} or {"token": "…"}');
  });
  it('are an error naming every way to give them when there are none', () => {
    expect(() => airflowCredentials(undefined, { ONCEBOX_AIRFLOW_USERNAME: 'u' })).toThrow(
      expect.objectContaining({ code: 'airflow_credentials', message: expect.stringContaining('set ONCEBOX_AIRFLOW_USERNAME and ONCEBOX_AIRFLOW_PASSWORD') }),
    );
  });
});

describe('the Airflow asset event of an oncebox event', () => {
  const event: StoredEvent = {
    cursor: 7,
    eventId: 'e-7',
    timestamp: '2026-12-01T00:00:00.000Z',
    key: 'k-7',
    asset: 'batch_ready',
    partitionKey: 'batch-0007',
    partitionDate: null,
    extra: { rows: 1007, oncebox: 'overwritten' },
    producer: 'orders-ingest',
    workflow: 'orders',
    runId: 'manual__2026-12-01',
    task: 'ingest',
    attempt: 2,
    seq: 13,
    trace: null,
    causedBy: null,
    depth: 0,
  };
  it('carries the partition, the event extra, and the key the lookup matches with its provenance', () => {
    const body = assetEventBody(event, 3);
    expect(body).toEqual({
      asset_id: 3,
      partition_key: 'batch-0007',
      extra: {
        rows: 1007,
        oncebox: { key: 'k-7', eventId: 'e-7', asset: 'batch_ready', cursor: 7, producer: 'orders-ingest', workflow: 'orders', runId: 'manual__2026-12-01', task: 'ingest', attempt: 2, timestamp: '2026-12-01T00:00:00.000Z' },
      },
    });
    expect(forwardedKey(body)).toBe('k-7');
  });
  it('has no partition key for an event without one', () => {
    expect(assetEventBody({ ...event, partitionKey: null }, 3)).not.toHaveProperty('partition_key');
  });
  it('is refused before the post when Airflow would refuse its partition key, naming the limit and the fix', () => {
    expect(partitionKeyProblem(event)).toBeUndefined();
    expect(partitionKeyProblem({ ...event, partitionKey: null })).toBeUndefined();
    expect(partitionKeyProblem({ ...event, partitionKey: 'p'.repeat(250) })).toBeUndefined();
    expect(partitionKeyProblem({ ...event, partitionKey: 'p'.repeat(251) })).toBe(
      'the event at cursor 7 (key k-7) has a partition key of 251 characters, and Airflow takes at most 250; shorten the partition keys of the assets you forward to Airflow',
    );
    expect(partitionKeyProblem({ ...event, partitionKey: ' \t' })).toMatch(/white space only, which Airflow refuses/);
  });
  it('is told apart from events posted by others', () => {
    expect(forwardedKey({ extra: null })).toBeUndefined();
    expect(forwardedKey({ extra: { oncebox: 'x' } })).toBeUndefined();
    expect(forwardedKey({ extra: { oncebox: { key: 5 } } })).toBeUndefined();
  });
});
