import { commitBench } from './bench/commit-bench.js';
for (let i = 0; i < 3; i++) {
  const r = await commitBench(1, 4000, 200);
  console.log(JSON.stringify(r));
}
