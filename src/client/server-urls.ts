import { z } from 'zod';

/** @internal Whether a server address is an http:// or https:// URL: the options' check and the CLI's --server. */
export function isServerUrl(value: string): boolean {
  return URL.canParse(value) && /^https?:$/.test(new URL(value).protocol);
}

const httpUrl = z.string().refine(isServerUrl, {
  error: 'must be an http:// or https:// URL such as "http://127.0.0.1:8787"',
});

/** @internal One server URL, or several instances of one server over a shared PostgreSQL database. */
export const serversSchema = z.union([httpUrl, z.array(httpUrl).min(1, { error: 'must list at least one server URL' })]);
