import { request as httpRequest } from 'node:http';

/** Posts a raw body to the server and returns status, content type and parsed JSON (or text). */
export async function post(url: string, body: string, headers: Record<string, string> = { 'content-type': 'application/json' }) {
  const response = await fetch(url, { method: 'POST', headers, body });
  const text = await response.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, contentType: response.headers.get('content-type') ?? '', json, text };
}

export const STREAM = { producer: 'p', workflow: 'w', runId: 'r1', task: null, attempt: 1 };

let counter = 0;
/** A fresh, valid UUID key for a hand-made item. */
export function newKey(): string {
  counter++;
  return `00000000-0000-4000-8000-${counter.toString(16).padStart(12, '0')}`;
}

export function item(seq: number, key: string, fields: Record<string, unknown> = {}) {
  return { seq, key, kind: 'event', asset: 'batch_ready', partitionKey: `batch-${seq}`, ...fields };
}

/**
 * Sends a request exactly as given, target and body byte for byte (fetch would normalise the target),
 * and returns status, content type and parsed JSON (or undefined).
 */
export function rawRequest(url: string, method: string, target: string, body?: string, headers: Record<string, string> = {}) {
  const { hostname, port } = new URL(url);
  return new Promise<{ status: number; type: string; json: any; headers: Record<string, string | string[] | undefined> }>((resolve, reject) => {
    const req = httpRequest({ host: hostname, port, method, path: target, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), json, headers: res.headers });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}
