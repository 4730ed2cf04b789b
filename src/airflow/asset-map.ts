import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { assetNameSchema, describeFirstIssue } from '../protocol/emission.js';
import type { AirflowAsset, AirflowClient } from './airflow-client.js';
import { AirflowError, AirflowErrorCode } from './errors.js';

/** One Airflow asset, by its name or by its URI; a bare string is a name. */
export type AirflowAssetRef = string | { name: string } | { uri: string };

/** Which oncebox asset goes to which Airflow asset: `{ "batch_ready": { "name": "oncebox_batches" } }`. */
export type AirflowAssetMap = Record<string, AirflowAssetRef>;

const refSchema = z.union(
  [
    z.string().min(1),
    z.strictObject({ name: z.string().min(1) }),
    z.strictObject({ uri: z.string().min(1) }),
  ],
  { error: 'must be an Airflow asset name, { "name": "…" } or { "uri": "…" }' },
);
const mapSchema = z
  .record(assetNameSchema, refSchema)
  .refine((map) => Object.keys(map).length > 0, { error: 'must map at least one oncebox asset to an Airflow asset' });

/** Checks a map given in code; the error names the entry at fault. */
export function parseAssetMap(input: unknown, source = 'the asset map'): AirflowAssetMap {
  const parsed = mapSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const problem = describeFirstIssue(parsed.error, { input });
  throw new AirflowError(AirflowErrorCode.InvalidMap, `${source}: ${problem.message}`, { field: problem.field });
}

/** Reads and checks a map file (JSON). */
export function readAssetMap(path: string): AirflowAssetMap {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new AirflowError(AirflowErrorCode.InvalidMap, `cannot read the asset map ${path}: ${(error as Error).message}`, { cause: error });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new AirflowError(AirflowErrorCode.InvalidMap, `the asset map ${path} is not JSON: ${(error as Error).message}`, { cause: error });
  }
  return parseAssetMap(json, `the asset map ${path}`);
}

/**
 * Looks up every mapped Airflow asset through the REST API, before anything is forwarded: a name Airflow
 * does not know is an error naming the map entry, not an event parked later.
 */
export async function resolveAssetMap(client: AirflowClient, map: AirflowAssetMap): Promise<Map<string, AirflowAsset>> {
  const resolved = new Map<string, AirflowAsset>();
  for (const [oncebox, ref] of Object.entries(map)) {
    const by = typeof ref === 'string' ? { name: ref } : ref;
    const asset = await client.findAsset(by);
    if (!asset) {
      const [field, value] = 'name' in by ? ['name', by.name] : ['uri', by.uri];
      throw new AirflowError(
        AirflowErrorCode.UnknownAsset,
        `the asset map sends "${oncebox}" to the Airflow asset with ${field} "${value}", but Airflow at ${new URL(client.url).origin} has none; ` +
          ('uri' in by
            ? `give the URI as Airflow lists it (GET /api/v2/assets; Airflow normalises URIs, and a provider may add its own rules, such as a default port), or deploy a DAG that declares that asset`
            : `check the map, or deploy a DAG that declares that asset`),
        { field: typeof ref === 'string' ? oncebox : `${oncebox}.${field}` },
      );
    }
    resolved.set(oncebox, asset);
  }
  return resolved;
}
