/**
 * The layers of src (../shared/DESIGN.md, docs/README.md "Where the code is"), lowest first: protocol;
 * sqlite and checkpoint; the producer (outbox) and the server (dedupe), which never import each other;
 * the consumer; the adapters (airflow, bullmq); the CLI on top. No import cycle, type-only ones included.
 * test/unit/layers.test.ts runs these rules on every `npm test`.
 */
const folder = (name) => `^src/${name}/`;
const notInto = (name, from, targets, why) => ({
  name,
  comment: why,
  severity: 'error',
  from: { path: folder(from) },
  to: { path: `^src/(${targets.join('|')})/` },
});

module.exports = {
  forbidden: [
    { name: 'no-circular', comment: 'an import cycle, type-only ones included', severity: 'error', from: {}, to: { circular: true } },
    notInto('protocol-is-the-ground-floor', 'protocol', ['sqlite', 'checkpoint', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'protocol is shared by every side and imports none'),
    notInto('sqlite-above-protocol-only', 'sqlite', ['checkpoint', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'the SQLite plumbing serves producer and server alike'),
    notInto('checkpoint-is-a-leaf', 'checkpoint', ['sqlite', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'the typed checkpoint is a leaf'),
    notInto('producer-never-imports-the-server', 'outbox', ['dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'the producer meets the server only in protocol, and knows nothing above it'),
    notInto('server-never-imports-the-producer', 'dedupe', ['outbox', 'checkpoint', 'consumer', 'airflow', 'bullmq', 'cli'], 'the server meets the producer only in protocol'),
    notInto('consumer-below-the-adapters', 'consumer', ['dedupe', 'airflow', 'bullmq', 'cli'], 'the consumer uses the producer, and is used by the adapters'),
    notInto('adapters-below-the-cli', 'airflow', ['dedupe', 'bullmq', 'cli'], 'an adapter stands on the consumer and the producer'),
    notInto('bullmq-below-the-cli', 'bullmq', ['dedupe', 'consumer', 'airflow', 'cli'], 'an adapter stands on the producer'),
  ],
  options: {
    tsConfig: { fileName: 'tsconfig.json' },
    // Type-only imports count: a type cycle ties the files together as much as a value cycle.
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist)/' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
