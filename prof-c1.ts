import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { openOutbox } from './src/outbox/index.js';
import { deriveKey, checkpointKey } from './src/outbox/keys.js';
import { rawOutbox } from './bench/raw-outbox.js';
const dir = mkdtempSync(join(tmpdir(), 'c1-'));
const box = await openOutbox({ path: join(dir, 'o.db'), server: 'http://127.0.0.1:9', relay: 'manual', producer: 'bench', run: { workflow: 'w', runId: 'r', task: 't', attempt: 1 }, durability: 'full' });
const asset = box.asset('batch_ready');
const progress = box.checkpoint('backlog', z.object({ batch: z.number() }));
const raw = rawOutbox(join(dir, 'raw.db'));

const N = 20000;
const keys = Array.from({ length: N }, (_, i) => deriveKey({ producer: 'raw', workflow: 'w', runId: 'r', task: 't', asset: 'batch_ready', partitionKey: `batch-${i}`, position: null, occurrence: 0 }));
const ckeys = Array.from({ length: N }, (_, c) => checkpointKey('raw', { workflow: 'w', runId: 'r', task: 't', attempt: 1 }, c + 1));
const rawCommit = raw.db.transaction((c: number) => {
  raw.setCheckpoint.run('backlog', `{"batch":${c}}`);
  raw.insertRow.run({ key: keys[c]!, seq: c + 1, kind: 'event', asset: 'batch_ready', partitionKey: `batch-${c}-0`, extra: `{"rows":0}`, checkpointName: null, checkpointValue: null });
  raw.insertRow.run({ key: ckeys[c]!, seq: 1e9 + c, kind: 'checkpoint', asset: '', partitionKey: null, extra: null, checkpointName: 'backlog', checkpointValue: `{"batch":${c}}` });
});
let to = 0, tr = 0;
for (let s = 0; s < N; s += 500) {
  let t = performance.now();
  for (let c = s; c < s + 500; c++) box.commit((tx) => { tx.set(progress, { batch: c }); tx.emit(asset, { partitionKey: `batch-${c}-0`, extra: { rows: 0 } }); });
  to += performance.now() - t;
  t = performance.now();
  for (let c = s; c < s + 500; c++) rawCommit.immediate(c);
  tr += performance.now() - t;
}
console.log('oncebox µs/commit', ((to * 1000) / N).toFixed(1), 'raw', ((tr * 1000) / N).toFixed(1));
await box.close({ timeoutMs: 0 });
