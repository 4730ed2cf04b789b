import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { InternalError } from '../../protocol/errors.js';
import { CATALOG_READ_TIMEOUT_MS, CatalogBusyError } from './database.js';

/**
 * The worker's code: a read-only connection of its own to the store's file, answering one query at a
 * time. Plain CommonJS text run with `eval`, so that it is the same under tsx, vitest and the built
 * package, with no file of its own to ship or transform.
 */
const WORKER_CODE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.path, { readonly: true, fileMustExist: true });
db.pragma('busy_timeout = 5000');
const prepared = new Map();
parentPort.on('message', ({ id, sql, parameters }) => {
  try {
    let statement = prepared.get(sql);
    if (statement === undefined) {
      if (prepared.size >= 256) prepared.clear();
      statement = db.prepare(sql);
      prepared.set(sql, statement);
    }
    parentPort.postMessage({ id, rows: statement.all(...parameters) });
  } catch (error) {
    parentPort.postMessage({ id, error: String(error && error.message || error) });
  }
});
`;

const SHUTTING_DOWN = 'the server is shutting down: retry the read on another instance, or once it is back';

interface Waiting {
  resolve: (rows: unknown[]) => void;
  reject: (error: Error) => void;
}

/**
 * The catalog's reads on the embedded store, in a worker thread with its own read-only connection.
 * better-sqlite3 is synchronous: a read on the server's own connection holds its event loop for as long
 * as it runs, and every publisher's request and `/healthz` with it. In WAL mode a reader on another
 * connection sees the last commit and holds no writer up, so the catalog costs publishers nothing but
 * the CPU it takes. One worker: the catalog's reads queue behind each other, never in front of an ingest.
 * @internal
 */
export class SqliteReader {
  private worker: Worker | undefined;
  private readonly waiting = new Map<number, Waiting>();
  private nextId = 0;
  private closed = false;

  constructor(private readonly path: string) {}

  /** The rows of one read-only statement. */
  all(sql: string, parameters: readonly unknown[]): Promise<unknown[]> {
    if (this.closed) return Promise.reject(new CatalogBusyError(SHUTTING_DOWN));
    const worker = this.start();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      // A read cannot be interrupted inside its worker: one that runs too long takes the worker with it,
      // and the next read starts another.
      const timer = setTimeout(() => {
        if (this.worker === worker) this.worker = undefined;
        this.failAll(new CatalogBusyError());
        void worker.terminate();
      }, CATALOG_READ_TIMEOUT_MS);
      timer.unref();
      this.waiting.set(id, {
        resolve: (rows) => {
          clearTimeout(timer);
          resolve(rows);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      worker.postMessage({ id, sql, parameters });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    this.worker = undefined;
    this.failAll(new CatalogBusyError(SHUTTING_DOWN));
    await worker?.terminate();
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    const worker = new Worker(WORKER_CODE, { eval: true, workerData: { path: this.path, driver } });
    // The server's own handles keep the process alive; an idle reader must not.
    worker.unref();
    worker.on('message', ({ id, rows, error }: { id: number; rows?: unknown[]; error?: string }) => {
      const waiter = this.waiting.get(id);
      this.waiting.delete(id);
      if (error !== undefined) waiter?.reject(new Error(error));
      else waiter?.resolve(rows!);
    });
    // A worker that died (out of memory, a bug) fails what it held; the next read starts another.
    const lost = (error: Error) => {
      if (this.worker === worker) this.worker = undefined;
      this.failAll(error);
    };
    worker.on('error', lost);
    worker.on('exit', (code) => lost(new InternalError(`the catalog reader stopped (exit ${code})`)));
    this.worker = worker;
    return worker;
  }

  private failAll(error: Error): void {
    for (const waiter of this.waiting.values()) waiter.reject(error);
    this.waiting.clear();
  }
}
