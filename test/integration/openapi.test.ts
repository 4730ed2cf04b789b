import SwaggerParser from '@apidevtools/swagger-parser';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { openApiText, OPENAPI_FILE } from '../../scripts/openapi.js';
import { REPO } from '../support/child.js';
import { item, newKey, STREAM } from '../support/http.js';
import { startServer } from '../support/server.js';

describe('the OpenAPI document', () => {
  it('is valid OpenAPI 3.1, served at /openapi.json, and docs/openapi.json is current', async () => {
    const { url } = await startServer({ token: 'the-admin-token' });
    const response = await fetch(`${url}/openapi.json`);
    expect(response.status).toBe(200);
    const served = (await response.json()) as Record<string, unknown>;
    expect(served).toEqual(JSON.parse(openApiText()));
    expect(readFileSync(join(REPO, OPENAPI_FILE), 'utf8'), 'docs/openapi.json is stale: run npm run openapi -- --write').toBe(openApiText());
    const api = (await SwaggerParser.validate(structuredClone(served) as never)) as { openapi: string };
    expect(api.openapi).toBe('3.1.0');
  });

  it("describes the server's real answers: each validates against the document's schemas", async () => {
    const { url, server } = await startServer({ token: 'the-admin-token' });
    const doc = JSON.parse(openApiText()) as { components: { schemas: Record<string, object> } };
    const ajv = new Ajv2020({ strict: false });
    addFormats.default(ajv);
    for (const [name, schema] of Object.entries(doc.components.schemas)) ajv.addSchema(schema, `#/components/schemas/${name}`);
    const check = (name: string, value: unknown) => {
      const validate = ajv.getSchema(`#/components/schemas/${name}`)!;
      expect(validate(value), `${name}: ${JSON.stringify(validate.errors)}`).toBe(true);
    };
    const admin = { authorization: 'Bearer the-admin-token', 'content-type': 'application/json' };
    const batch = {
      stream: STREAM,
      items: [
        item(1, newKey(), { extra: { rows: 3 } }),
        { seq: 2, key: newKey(), kind: 'checkpoint', name: 'backlog', value: { batch: 1 } },
        item(3, newKey(), { asset: 'not_registered' }),
      ],
    };
    check('EmissionBatch', batch);
    const posted: any = await (await fetch(`${url}/v1/emissions`, { method: 'POST', headers: admin, body: JSON.stringify(batch) })).json();
    check('EmissionBatchResponse', posted);
    expect(posted.results.map((r: { status: string }) => r.status)).toEqual(['accepted', 'checkpointed', 'rejected']);
    check('EventPage', await (await fetch(`${url}/v1/events`, { headers: admin })).json());
    check('StreamState', await (await fetch(`${url}/v1/streams/p/r1`, { headers: admin })).json());
    check('Problem', await (await fetch(`${url}/v1/events?limit=0`, { headers: admin })).json());
    const created: any = await (await fetch(`${url}/v1/tokens`, { method: 'POST', headers: admin, body: JSON.stringify({ scope: 'read' }) })).json();
    check('TokenInfo', (({ token: _token, allows: _allows, ...info }) => info)(created));
    check('TokenInfo', (await server.store.tokens.list())[0]);
  });
});
