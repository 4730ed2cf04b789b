/**
 * The layers of src (../shared/DESIGN.md, docs/README.md "Where the code is"), lowest first: protocol;
 * failpoints (the named crash points of producer, consumer and server alike, a leaf); sqlite, checkpoint
 * and client (the HTTP client, failure streaks, the logger); the producer
 * (outbox) and the server (dedupe), which never import each other; the consumer; the adapters (airflow,
 * bullmq) and the testing kit (testing), which nothing else imports; the CLI on top. Inside the producer, the rooms along the path an emission takes: file/ at the
 * bottom, commit/ and relay/ beside each other above it, and the public face (index.ts, open.ts,
 * outbox.ts, asset.ts, options.ts, resume.ts, receipts.ts, metrics.ts, status.ts) on top; the rooms reach up only to the run's identity (run.ts) and the events'
 * types (events.ts), which import nothing of the producer. No import cycle, type-only ones included.
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
    notInto('protocol-is-the-ground-floor', 'protocol', ['sqlite', 'checkpoint', 'client', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'protocol is shared by every side and imports none'),
    notInto('sqlite-above-protocol-only', 'sqlite', ['checkpoint', 'client', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'the SQLite plumbing serves producer and server alike'),
    notInto('failpoints-are-a-leaf', 'failpoints', ['protocol', 'sqlite', 'checkpoint', 'client', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'testing', 'cli'], 'a crash point knows nothing of what it stops'),
    notInto('checkpoint-is-a-leaf', 'checkpoint', ['sqlite', 'client', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'the typed checkpoint is a leaf'),
    notInto('producer-never-imports-the-server', 'outbox', ['dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'the producer meets the server only in protocol, and knows nothing above it'),
    notInto('client-above-protocol-only', 'client', ['sqlite', 'checkpoint', 'outbox', 'dedupe', 'consumer', 'airflow', 'bullmq', 'cli'], 'the client side plumbing is shared by producer, consumer and forwarder, and knows none of them'),
    notInto('server-never-imports-the-producer', 'dedupe', ['client', 'outbox', 'checkpoint', 'consumer', 'airflow', 'bullmq', 'cli'], 'the server meets the producer only in protocol'),
    notInto('consumer-below-the-adapters', 'consumer', ['dedupe', 'airflow', 'bullmq', 'cli'], 'the consumer uses the producer, and is used by the adapters'),
    notInto('adapters-below-the-cli', 'airflow', ['dedupe', 'bullmq', 'cli'], 'an adapter stands on the consumer and the producer'),
    notInto('bullmq-below-the-cli', 'bullmq', ['dedupe', 'consumer', 'airflow', 'cli'], 'an adapter stands on the producer'),
    notInto('testing-kit-below-the-cli', 'testing', ['cli'], 'the testing kit stands on the producer, the consumer and the server, beside the adapters'),
    {
      name: 'nothing-imports-the-testing-kit',
      comment: "the testing kit is for users' tests: no part of oncebox depends on it",
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/testing/' },
      to: { path: '^src/testing/' },
    },
    notInto('file-room-at-the-bottom', 'outbox/file', ['outbox/commit', 'outbox/relay'], 'the outbox file (tables, rows, runs, meta) knows nothing of committing or relaying'),
    notInto('commit-room-beside-the-relay', 'outbox/commit', ['outbox/relay'], 'committing writes the file; it never reaches into the relay'),
    notInto('relay-room-beside-the-commit', 'outbox/relay', ['outbox/commit'], 'the relay reads what was committed from the file, never from the commit code'),
    {
      name: 'rooms-below-the-public-face',
      comment: "the producer's rooms reach up only to the run's identity and the events' types",
      severity: 'error',
      from: { path: '^src/outbox/(file|commit|relay)/' },
      to: { path: '^src/outbox/[^/]+\\.ts$', pathNot: '^src/outbox/(run|events)\\.ts$' },
    },
    {
      name: 'console-reads-only-the-protocol',
      comment: "the web console talks to the server over HTTP; of src it shares only the wire types",
      severity: 'error',
      from: { path: '^console/' },
      to: { path: '^src/', pathNot: '^src/protocol/' },
    },
    {
      name: 'nothing-imports-the-console',
      comment: 'the console is a separate build (dist/console) that the server serves as files',
      severity: 'error',
      from: { path: '^src/' },
      to: { path: '^console/' },
    },
    {
      name: 'leaves-of-the-producer',
      comment: "the run's identity and the events' types are leaves every room may import",
      severity: 'error',
      from: { path: '^src/outbox/(run|events)\\.ts$' },
      to: { path: '^src/outbox/', pathNot: '^src/outbox/(run|events)\\.ts$' },
    },
  ],
  options: {
    tsConfig: { fileName: 'tsconfig.json' },
    // Type-only imports count: a type cycle ties the files together as much as a value cycle.
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist)/' },
    enhancedResolveOptions: { extensions: ['.ts', '.tsx', '.js'] },
  },
};
