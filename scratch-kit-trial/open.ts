// Shared opening of the outbox, from the environment the kit gives (docs/testing.md, "The job under test").
import { z } from 'zod';
import { openOutbox, FencedError } from '../src/outbox/index.js';

export { FencedError, z };
export const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`missing ${name}`);
  return value;
};
import { mkdirSync } from 'node:fs';
// ONCEBOX_DATA is not created by the kit: make it.
export const DATA = () => { const dir = env('ONCEBOX_DATA'); mkdirSync(dir, { recursive: true }); return dir; };
export const open = (task?: string) =>
  openOutbox({
    path: env('ONCEBOX_OUTBOX'),
    server: env('ONCEBOX_SERVER'),
    producer: 'orders-ingest',
    run: { workflow: 'orders', runId: env('ONCEBOX_RUN_ID'), ...(task ? { task } : {}), attempt: Number(env('ONCEBOX_ATTEMPT')) },
  });
export const BATCHES = 4;
