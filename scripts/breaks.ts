/**
 * Deliberate bugs, each one plausible, each one breaking a guarantee of docs/guarantees.md, and the
 * tests that must catch it. `npm run breaks` puts each into a scratch copy of the repository, runs its
 * tests there and checks that they fail (and pass without the bug); `npm run breaks -- --write` also
 * rewrites the table in docs/guarantees.md from this list. test/unit/breaks.test.ts checks, on every
 * `npm test`, that each edit still applies to the code and that the table matches this list.
 */

export interface Edit {
  file: string;
  /** Text that must occur exactly once in the file. */
  find: string;
  replace: string;
}

export interface TestSelection {
  file: string;
  /** A test name pattern (vitest -t), or every test of the file. */
  name?: string;
}

export interface Break {
  /** The broken code, as the docs table says it. */
  what: string;
  guarantee: string;
  edits: Edit[];
  /** Tests that must each fail with the break in place. */
  caughtBy: TestSelection[];
  /** Needs PostgreSQL. */
  postgres?: boolean;
}

const sqliteStore = 'src/dedupe/sqlite/store.ts';
const postgresStore = 'src/dedupe/postgres/store.ts';
const postgresIngestSteps = 'src/dedupe/postgres/ingest-steps.ts';
const postgresStatements = 'src/dedupe/postgres/statements.ts';
const sqliteStatements = 'src/dedupe/sqlite/statements.ts';
const relay = 'src/outbox/relay/relay.ts';
const answers = 'src/outbox/relay/answers.ts';
const fileRows = 'src/outbox/file/rows.ts';
const sharedFileTasks = 'test/integration/shared-file-tasks.test.ts';
const heldRelease = 'test/integration/held-release.test.ts';
const hostileReview = 'test/integration/hostile-review.test.ts';
const model = 'test/property/outbox-model.test.ts';
const sameFile = 'test/integration/same-file-retry.test.ts';
const delivery = 'test/integration/delivery.test.ts';
const scopedTokens = 'test/integration/scoped-tokens.test.ts';
const tokens = 'src/dedupe/tokens.ts';
const conformance = 'test/store/conformance.test.ts';
const pipelined = 'test/fault/pipelined-relay.test.ts';
const cluster = 'test/fault/postgres-cluster.test.ts';
const routeScopes = 'test/integration/route-scopes.test.ts';
const forgedTokens = 'test/integration/forged-tokens.test.ts';
const conflicts = 'test/integration/conflicts.test.ts';
const terminalPaths = 'test/integration/terminal-paths.test.ts';
const multiTask = 'test/integration/multi-task.test.ts';
const triggerTest = 'test/integration/consumer-trigger.test.ts';

const ingestPlan = 'src/dedupe/ingest/plan.ts';
const forwarder = 'src/airflow/forwarder.ts';
const lifecycle = 'test/integration/lifecycle.test.ts';
const lifecycleTakeover = 'test/integration/lifecycle-takeover.test.ts';
const lifecycleCheck = 'src/dedupe/lifecycle-check.ts';
const catalogLag = 'src/dedupe/catalog/lag.ts';
const catalogBounds = 'test/store/catalog-bounds.test.ts';
const airflowForwarder = 'test/airflow/forwarder.test.ts';
const bullmqWorker = 'src/bullmq/job-run.ts';
const bullmqTest = 'test/integration/bullmq.test.ts';
const bullmqChaos = 'test/fault/bullmq-chaos.test.ts';
/** The whole-system simulation at the seeds `npm test` runs: a break it catches is marked so in the table. */
export const SIMULATION_TEST = 'test/sim/simulation.test.ts';
const simulation = { file: SIMULATION_TEST };
const fencing = '  if (attempt < epoch) {';
const fencingUnlessCheckpointsOnly = "  if (attempt < epoch && items.some((i) => !(i.valid && i.kind === 'checkpoint'))) {";

export const BREAKS: Break[] = [
  {
    what: 'the server stores an event even when its key was already in the dedupe table (no dedupe)',
    guarantee: 'G3, G4',
    edits: [
      { file: 'src/dedupe/sqlite/migrations.ts', find: 'CREATE UNIQUE INDEX events_by_key ON events (producer, run_slot, filed_partition, key)', replace: 'CREATE INDEX events_by_key ON events (producer, run_slot, filed_partition, key)' },
      { file: 'src/dedupe/sqlite/statements.ts', find: "oc.columns(['producer', 'run_slot', 'filed_partition', 'key']).where('created_at', 'is not', null).doNothing()", replace: 'oc.doNothing()' },
      // A claim also looks where the key is not filed: without this it would find the key stored first.
      { file: 'src/dedupe/sqlite/store.ts', find: 's.findFiled.get({ producer, key: claim.key, ...elsewhere }) === undefined &&', replace: 'true &&' },
    ],
    caughtBy: [{ file: model }, { file: conformance, name: 'from 16 concurrent clients' }, simulation],
  },
  {
    what: '`commit()` run without a transaction (each statement on its own)',
    guarantee: 'G1',
    edits: [
      {
        file: 'src/outbox/outbox.ts',
        find: 'this.runInTransaction = this.file.db.transaction(<R>(',
        replace: 'this.runInTransaction = ((run: any) => Object.assign(run, { immediate: run }))(<R>(',
      },
    ],
    caughtBy: [{ file: 'test/fault/crash.test.ts', name: 'inside the commit' }, { file: 'test/unit/commit.test.ts', name: 'writes nothing' }],
  },
  {
    what: 'the local checkpoint written right after COMMIT instead of inside the commit',
    guarantee: 'G1',
    edits: [
      { file: 'src/outbox/commit/commit.ts', find: '    writer.saveCheckpoints(this.checkpoints);\n', replace: '' },
      {
        file: 'src/outbox/commit/commit.ts',
        find: '  committed(): readonly Emission[] {',
        replace:
          "  committed(): readonly Emission[] {\n    for (const [name, value] of this.checkpoints) this.context.file.checkpoints.setCheckpoint.run({ runId: this.context.run.runId, task: this.context.run.task ?? '', name, value, now: Date.now() });",
      },
    ],
    caughtBy: [{ file: 'test/unit/commit.test.ts', name: 'whose write to the checkpoint table fails' }, { file: 'test/fault/crash.test.ts', name: 'tight commit loop' }],
  },
  {
    what: "the relay's lease check removed",
    guarantee: 'G7',
    edits: [{ file: 'src/outbox/relay/lease.ts', find: 'if (renewed.changes === 0) {', replace: 'if (renewed.changes < 0) {' }],
    caughtBy: [{ file: delivery, name: 'lets one relay deliver at a time' }],
  },
  {
    what: 'the relay marking rows delivered when a request fails (a timeout, a reset)',
    guarantee: 'G3',
    edits: [
      {
        file: relay,
        find: 'return { stream, results: await this.sendTraced(stream, batch) };',
        replace:
          "return { stream, results: await this.sendTraced(stream, batch).catch(() => batch.map((row) => ({ status: 'accepted' as const, seq: row.seq, key: row.key, eventId: '00000000-0000-7000-8000-000000000000', timestamp: new Date(0).toISOString() }))) };",
      },
    ],
    caughtBy: [{ file: 'test/fault/network.test.ts' }, { file: model }, simulation],
  },
  {
    what: "the relay treating a `gap` answer as settled: the row is marked delivered",
    guarantee: 'G3',
    edits: [
      {
        file: answers,
        find: "      case 'checkpointed':",
        replace: "      case 'gap':\n        mark(row, s.markDelivered.run({ ...sent, eventId: null, timestamp: null, duplicate: null }).changes);\n        break;\n      case 'checkpointed':",
      },
      { file: answers, find: "const gap = results.find((result) => result.status === 'gap');", replace: 'const gap = undefined as { expectedSeq: number } | undefined;' },
    ],
    caughtBy: [{ file: delivery, name: 'stream_state_lost' }, { file: model }, simulation],
  },
  {
    what: 'pending rows read in `seq` order instead of commit order',
    guarantee: 'G3',
    edits: [
      {
        file: fileRows,
        find: "q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('pending')).orderBy('id').limit(p.limit.limit)),",
        replace: "q.selectFrom('outbox').selectAll().where('state', '=', sql.lit('pending')).orderBy('seq').limit(p.limit.limit)),",
      },
    ],
    caughtBy: [{ file: delivery, name: 'several runs sharing a file in commit order' }, simulation],
  },
  {
    what: 'a retried position answered from what the store held before the request, not from the items before it in the same request',
    guarantee: 'G4',
    edits: [
      {
        file: 'src/dedupe/ingest/resolve.ts',
        find: '        const result = replayResult(item, seq, key, outcome, outcome ? undefined : records.get(key));',
        replace: '        const result = replayResult(item, seq, key, stored.outcomes.get(seq), stored.outcomes.has(seq) ? undefined : stored.records.get(key));',
      },
    ],
    caughtBy: [{ file: conformance, name: 'sent twice in one request' }],
  },
  {
    what: 'a gap between requests sent together taken for a server that lost its rows (the relay stops)',
    guarantee: 'G3, G7',
    edits: [{ file: relay, find: '    return afterAnswers(stream, batch, results, applied, windowStart);', replace: '    return afterAnswers(stream, batch, results, applied);' }],
    caughtBy: [{ file: pipelined, name: 'seed 11' }, simulation],
  },
  {
    what: 'a checkpoint update stored past a gap, ahead of the events before it',
    guarantee: 'G11',
    edits: [
      {
        file: ingestPlan,
        find: "    if (seq > lastSeq + 1) return { type: 'final'",
        replace: "    if (seq > lastSeq + 1 && item.kind !== 'checkpoint') return { type: 'final'",
      },
    ],
    caughtBy: [{ file: pipelined, name: 'seed 11' }],
  },
  {
    what: 'a revised checkpoint update taken whatever its revision (a late, older rewrite wins)',
    guarantee: 'G11',
    edits: [{ file: sqliteStatements, find: "        .where('revision', '<', p.checkpoint.revision),", replace: '' }],
    caughtBy: [{ file: conformance, name: 'only upwards' }],
  },
  {
    what: 'a checkpoint row rewritten while in flight marked delivered by the answer to its older revision',
    guarantee: 'G11',
    edits: [
      {
        file: fileRows,
        find: 'const sentRow = { id: p.delivered.id, attempt: p.delivered.attempt, seq: p.delivered.seq, revision: p.delivered.revision };',
        replace: 'const sentRow = { id: p.delivered.id, attempt: p.delivered.attempt, seq: p.delivered.seq };',
      },
    ],
    caughtBy: [{ file: pipelined, name: 'rewritten while in flight' }],
  },
  {
    what: 'a checkpoint-only commit rewriting a waiting update that an emission follows (the value moves past the emission)',
    guarantee: 'G11',
    edits: [{ file: fileRows, find: "                .where('later.kind', '<>', sql.lit<RowKind>('checkpoint')),", replace: "                .where('later.kind', '=', sql.lit<RowKind>('nothing' as RowKind))," }],
    caughtBy: [{ file: 'test/unit/commit.test.ts', name: 'coalesces consecutive checkpoint-only commits' }],
  },
  {
    what: "resume: 'server-newer' adopting the server's checkpoints but delivering what the stale file had not sent (an older batch and held emission go out after the newer attempt's)",
    guarantee: 'G11',
    edits: [{ file: 'src/outbox/resume.ts', find: '        file.rows.dropUndelivered.run({ ...runKeyOf(run), attempt: run.attempt });\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/resume.test.ts', name: 'drops what its file had not delivered' }],
  },
  {
    what: "resume: 'server-newer' keeping the stale file's held emissions (its success would release what another machine's attempt dropped)",
    guarantee: 'G11, G25',
    edits: [{ file: 'src/outbox/resume.ts', find: '        file.terminal.forgetHeldOfRun.run(runKeyOf(run));\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/resume.test.ts', name: 'drops what its file had not delivered' }, simulation],
  },
  {
    what: "resume: 'server-newer' judging \"further\" by the epoch, which the retry's own claim raised (it throws its file's progress away)",
    guarantee: 'G11',
    edits: [{ file: 'src/outbox/resume.ts', find: '  if (!fresh && !deliveredPast(state, run.attempt, lastWriter)) return undefined;', replace: '  if (!fresh && lastWriter !== undefined && state.epoch <= lastWriter) return undefined;' }],
    caughtBy: [{ file: 'test/integration/resume.test.ts', name: "keeps its file's own progress" }],
  },
  {
    what: "the BullMQ adapter trusting a machine's older file of a job over the server's state (a run ended elsewhere, unheard by BullMQ, runs again)",
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: "      resume: 'server-newer',\n", replace: '' }],
    caughtBy: [{ file: bullmqTest, name: 'holding an older file' }],
  },
  {
    what: 'a waiting reader not woken when this instance stores events (it looks again only every 5 s)',
    guarantee: 'long-poll',
    edits: [{ file: sqliteStore, find: '    if (assets.size > 0) this.stored.notify(assets);\n', replace: '' }],
    caughtBy: [{ file: conformance, name: 'answers as soon as it is stored' }],
  },
  {
    what: 'no NOTIFY when PostgreSQL stores events, so readers on other instances wait for their next look',
    guarantee: 'long-poll',
    edits: [{ file: postgresIngestSteps, find: '    await runStatement(client, this.statements.notifyStored, { channel: this.channel, payload: notifyPayload(assets) });\n', replace: '' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'LISTEN/NOTIFY' }],
    postgres: true,
  },
  {
    what: 'every waiting reader woken by any event, whatever its asset (idle readers cost every publish a read)',
    guarantee: 'long-poll',
    edits: [{ file: 'src/dedupe/event-signal.ts', find: '    if (assets === undefined) {', replace: '    if (assets !== null) {' }],
    caughtBy: [{ file: conformance, name: 'wakes only the waiting readers' }],
  },
  {
    what: 'readers woken together each read the store on their own',
    guarantee: 'long-poll',
    edits: [{ file: 'src/dedupe/event-page.ts', find: '  if (running !== undefined) return running;', replace: '' }],
    caughtBy: [{ file: conformance, name: 'wakes only the waiting readers' }],
  },
  {
    what: 'no cap on the waiting reads of one token',
    guarantee: 'long-poll',
    edits: [{ file: 'src/dedupe/long-polls.ts', find: "    if (principal !== '' && mine >= this.limits.maxWaitersPerToken) {", replace: '    if (false as boolean) {' }],
    caughtBy: [{ file: conformance, name: 'caps waiting reads' }],
  },
  {
    what: 'the state of idle streams never compacted',
    guarantee: 'retention',
    edits: [{ file: sqliteStore, find: '    const streams = await deleteInBatches(limit, () => this.compactStreams.immediate(idleBefore, limit));', replace: '    const streams = 0;' }],
    caughtBy: [{ file: conformance, name: 'forgets the state of streams idle' }],
  },
  {
    what: 'no cap on the new streams a token opens',
    guarantee: 'retention',
    edits: [{ file: 'src/dedupe/new-streams.ts', find: "    if (principal === '') return;", replace: '    return;' }],
    caughtBy: [{ file: conformance, name: 'caps the new streams' }],
  },
  {
    what: 'requests without a live token never counted against their address',
    guarantee: 'auth',
    edits: [{ file: 'src/dedupe/auth.ts', find: '      const over = await limit?.()?.refused(request);', replace: '      const over = undefined as { retryAfterS: number } | undefined;' }],
    caughtBy: [{ file: 'test/integration/auth.test.ts', name: 'count against their source address' }],
  },
  {
    what: "a lifecycle event's extra taken as sent (a made-up outcome of another run)",
    guarantee: 'auth',
    edits: [{ file: 'src/dedupe/routes/publishing.ts', find: 'refuseOutOfScope(checkLifecycleEvent(checkItem(item, index), stream),', replace: 'refuseOutOfScope(checkItem(item, index),' }],
    caughtBy: [{ file: 'test/integration/scoped-tokens.test.ts', name: 'lifecycle' }],
  },
  {
    what: "a relay that holds the lease never sees another connection's commits (two outboxes, or processes, on one file wait on each other)",
    guarantee: 'G3, G12',
    edits: [{ file: relay, find: '    this.watchForeignCommits();\n', replace: '' }],
    caughtBy: [{ file: sameFile, name: 'two outboxes on one file' }, simulation],
  },
  {
    what: "the server's fencing check removed",
    guarantee: 'G10',
    edits: [{ file: ingestPlan, find: fencing, replace: '  if (false) {' }],
    caughtBy: [{ file: model }, { file: 'test/fault/retries.test.ts', name: 'beside a zombie' }, { file: conformance, name: 'fences every item' }, simulation],
  },
  {
    what: 'fencing skipped for a request that carries only checkpoint items',
    guarantee: 'G10, G11',
    edits: [{ file: ingestPlan, find: fencing, replace: fencingUnlessCheckpointsOnly }],
    caughtBy: [{ file: conformance, name: 'holds only checkpoint updates' }, simulation],
  },
  {
    what: 'a commit of an older attempt not checked against the attempts that opened the file',
    guarantee: 'G10',
    edits: [{ file: 'src/outbox/outbox.ts', find: '      this.file.runs.assertCurrent(this.runKey!, this.run!.attempt);\n', replace: '' }],
    caughtBy: [{ file: sameFile, name: 'the lost-emission interleaving' }, { file: model, name: 'the lost-emission interleaving' }, simulation],
  },
  {
    what: "a retry opening a file does not take over the older attempts' undelivered rows",
    guarantee: 'G12',
    edits: [{ file: 'src/outbox/file/run-attempts.ts', find: 'for (const { id } of rows) this.rows.takeOver.run', replace: 'for (const { id } of rows.slice(rows.length)) this.rows.takeOver.run' }],
    caughtBy: [{ file: sameFile, name: 'takes over what the zombie committed' }, simulation],
  },
  {
    what: 'rows parked by a fence not taken over by a later retry on the same file',
    guarantee: 'G12',
    edits: [
      {
        file: 'src/outbox/file/rows.ts',
        find: "            eb.and([eb('state', '=', sql.lit('dead')), eb('dead_code', '=', sql.lit(ProducerErrorCode.Fenced))]),\n",
        replace: '',
      },
    ],
    caughtBy: [{ file: sameFile, name: 'revives rows a fence parked' }, simulation],
  },
  {
    what: 'the relay marking a row without checking it is still where it was sent from',
    guarantee: 'G7, G12',
    edits: [{ file: fileRows, find: 'const sentRow = { id: p.delivered.id, attempt: p.delivered.attempt, seq: p.delivered.seq, revision: p.delivered.revision };', replace: 'const sentRow = { id: p.delivered.id, revision: p.delivered.revision };' }],
    caughtBy: [{ file: sameFile, name: 'in flight' }, simulation],
  },
  {
    what: 'the relay stopping for good when one attempt in its file is fenced',
    guarantee: 'G7',
    edits: [{ file: relay, find: '        if (error instanceof FencedError) {\n          this.recordError(error);\n          continue;\n        }\n', replace: '' }],
    caughtBy: [{ file: delivery, name: "goes on delivering the file's other runs" }],
  },
  {
    what: "the server's ingest run outside a transaction (SQLite)",
    guarantee: 'G4',
    edits: [
      {
        file: sqliteStore,
        find: 'this.ingestTransaction = this.db.transaction((stream',
        replace: 'this.ingestTransaction = ((run: any) => Object.assign(run, { immediate: run }))((stream',
      },
    ],
    caughtBy: [{ file: conformance, name: 'fails part-way' }],
  },
  {
    what: 'an event removed by a shorter event retention takes its dedupe record with it (a retry inside the window is stored again)',
    guarantee: 'G15',
    edits: [{ file: sqliteStore, find: '      this.statements.keepRecords.run({ cursors });\n', replace: '' }],
    caughtBy: [{ file: conformance, name: 'keeps the dedupe record of an event removed' }],
  },
  {
    what: 'a record kept past its event no longer holds the key (a retry claims it anew)',
    guarantee: 'G15',
    edits: [{ file: sqliteStore, find: 's.findKeptRecord.get({ producer, key: claim.key }) === undefined &&', replace: 'true &&' }],
    caughtBy: [{ file: conformance, name: 'keeps the dedupe record of an event removed' }],
  },
  {
    what: 'PostgreSQL: an event removed by a shorter event retention takes its dedupe record with it',
    guarantee: 'G15',
    postgres: true,
    edits: [{ file: postgresStore, find: '               SELECT producer, key, fingerprint, event_id, ts, created_at, duplicates FROM gone WHERE created_at IS NOT NULL', replace: '               SELECT producer, key, fingerprint, event_id, ts, created_at, duplicates FROM gone WHERE false' }],
    caughtBy: [{ file: conformance, name: 'keeps the dedupe record of an event removed' }],
  },
  {
    what: 'PostgreSQL: a record kept past its event no longer holds the key (a retry claims it anew)',
    guarantee: 'G15',
    postgres: true,
    edits: [{ file: postgresStatements, find: 'WHERE NOT EXISTS (SELECT 1 FROM dedupe d WHERE d.producer = ${events.producer} AND d.key = e.key OFFSET 0)', replace: 'WHERE true' }],
    caughtBy: [{ file: conformance, name: 'keeps the dedupe record of an event removed' }],
  },
  {
    what: 'PostgreSQL store migration 012 leaving the retries a record absorbed behind (the catalog counts them no more)',
    guarantee: 'G15, G27',
    postgres: true,
    edits: [{ file: 'src/dedupe/postgres/migrations.ts', find: 'fingerprint = d.fingerprint, created_at = d.created_at, duplicates = d.duplicates', replace: 'fingerprint = d.fingerprint, created_at = d.created_at' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'migration 012' }, simulation],
  },
  {
    what: "a claim looks for its key only where it would file it (a key stored before migration 013, or sent unlisted, is stored again when listed as the run's)",
    guarantee: 'G4',
    edits: [{ file: sqliteStore, find: 's.findFiled.get({ producer, key: claim.key, ...elsewhere }) === undefined &&', replace: 'true &&' }],
    caughtBy: [
      { file: conformance, name: 'oncebox-run-keys' },
      { file: 'test/store/sqlite-store.test.ts', name: 'migration 013' },
    ],
  },
  {
    what: "a duplicate's first receipt is looked up, and counted, only where keys are filed per producer",
    guarantee: 'G4',
    edits: [{ file: 'src/dedupe/key-places.ts', find: 'return [this.ofRun(key), PRODUCER_PLACE];', replace: 'return [PRODUCER_PLACE];' }],
    caughtBy: [{ file: conformance, name: 'oncebox-run-keys' }],
  },
  {
    what: "a claim on PostgreSQL looks for its key only where it would file it (a key stored before its migration 013 is stored again when listed as the run's)",
    guarantee: 'G4',
    edits: [{ file: 'src/dedupe/postgres/statements.ts', find: 'SELECT 1 FROM events x WHERE x.producer = ${events.producer} AND', replace: 'SELECT 1 FROM events x WHERE false AND' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'migration 013' }],
  },
  {
    what: "PostgreSQL looks a key's record up, and counts its duplicates, only where its run would file it (a key stored per producer is lost to a retry listing it)",
    guarantee: 'G4',
    edits: [
      { file: 'src/dedupe/postgres/statements.ts', find: "WHERE producer = ${records.producer} AND run_slot = 0 AND filed_partition = ''", replace: "WHERE producer = ${records.producer} AND run_slot = -1 AND filed_partition = ''" },
      { file: 'src/dedupe/postgres/statements.ts', find: "events.run_slot = 0 AND events.filed_partition = ''", replace: "events.run_slot = -1 AND events.filed_partition = ''" },
    ],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'migration 013' }],
  },
  {
    what: 'a refused token at resume (a retry reading its run from the server) wrapped as ResumeUnavailableError, a transient-looking error, instead of CredentialsError',
    guarantee: 'G17',
    edits: [{ file: 'src/outbox/resume.ts', find: '    if (error instanceof CredentialsError) throw error;', replace: '    if (false) throw error;' }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'is refused at openOutbox' }, simulation],
  },
  {
    what: "a PostgreSQL group's events notify no reader (readers waiting on another instance wait out their look-again interval)",
    guarantee: 'long-poll',
    edits: [{ file: 'src/dedupe/postgres/ingest-groups.ts', find: '    if (stored.length > 0) await this.steps.notifyStored(client, stored);', replace: '    if (false) await this.steps.notifyStored(client, stored);' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'wakes a reader waiting on one instance' }],
  },
  {
    what: '`npm run bench -- --only` with a section it does not have starts the whole quarter-hour run',
    guarantee: 'docs',
    edits: [{ file: 'bench/run.ts', find: 'if (values.only !== undefined && !(SECTIONS as readonly string[]).includes(values.only)) {', replace: 'if (false) {' }],
    caughtBy: [{ file: 'test/integration/bench-cli.test.ts', name: 'bogus' }],
  },
  {
    what: "PostgreSQL files a run's key under its whole partition key (an index entry of a long producer name and partition key is refused: a 500 the relay retries for good)",
    guarantee: 'G4',
    edits: [{ file: 'src/dedupe/postgres/statements.ts', find: 'const FILED_PARTITION = sql.lit(64);', replace: 'const FILED_PARTITION = sql.lit(100_000);' }],
    caughtBy: [{ file: conformance, name: 'longest names the protocol allows' }],
  },
  {
    what: 'PostgreSQL keys checkpoints by producer, run, task and whole name (a checkpoint of four long names is refused: a 500 the relay retries for good)',
    guarantee: 'G4',
    edits: [{ file: 'src/dedupe/postgres/migrations.ts', find: '      ALTER TABLE stream_checkpoints DROP CONSTRAINT stream_checkpoints_pkey;\n', replace: '' }],
    caughtBy: [{ file: conformance, name: 'longest names the protocol allows' }],
  },
  {
    what: "PostgreSQL files a run's keys per producer (a request's keys on as many pages of the key index as it has events)",
    guarantee: 'G4',
    edits: [{ file: 'src/dedupe/postgres/ingest-steps.ts', find: 'ofRun: items.map((item) => item.keyOfRun === true),', replace: 'ofRun: items.map(() => false),' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: "files a key said to be the run's" }],
  },
  {
    what: "the relay says every key is its run's alone (an explicit key sent from two runs is stored twice)",
    guarantee: 'G4',
    edits: [{ file: 'src/outbox/relay/batch-encoding.ts', find: "row.kind === 'event' && row.key_scope === 'partition' ?", replace: "row.kind === 'event' ?" }],
    caughtBy: [{ file: 'test/integration/key-scope.test.ts' }, { file: 'test/unit/batch-encoding.test.ts' }],
  },
  {
    what: 'a waiting reader that left is read for again (at shutdown, reads on a closing store: a 500 and an error line per reader)',
    guarantee: 'G16',
    edits: [{ file: 'src/dedupe/event-page.ts', find: '    if (gone.aborted) return page;\n', replace: '' }],
    caughtBy: [{ file: 'test/unit/event-page.test.ts' }],
  },
  {
    what: 'keys of stored events never leave the dedupe window (a retry past it is answered from an expired record)',
    guarantee: 'G15',
    edits: [{ file: sqliteStore, find: ' + (await drain(this.statements.releaseKeys, now - policy.dedupeRetentionMs))', replace: '' }],
    caughtBy: [{ file: conformance, name: 'compacts dedupe records past the window' }],
  },
  {
    what: 'migration 012 drops the dedupe records whose events are gone (a retry of one is stored again)',
    guarantee: 'G4, G15',
    edits: [
      {
        file: 'src/dedupe/sqlite/migrations.ts',
        find: 'DELETE FROM dedupe WHERE EXISTS (SELECT 1 FROM events e WHERE e.event_id = dedupe.event_id AND e.created_at IS NOT NULL);',
        replace: 'DELETE FROM dedupe;',
      },
    ],
    caughtBy: [{ file: 'test/store/sqlite-store.test.ts', name: 'moves each record onto its event' }],
  },
  {
    what: "a request that fails inside a group commit fails the requests it shares the commit with",
    guarantee: 'G4, G8',
    edits: [{ file: sqliteStore, find: '        } catch (error) {\n          return { error };\n        }', replace: '        } catch (error) {\n          throw error;\n        }' }],
    caughtBy: [{ file: 'test/store/sqlite-store.test.ts', name: 'commits the requests that arrive together in one transaction' }],
  },
  {
    what: "a request's events stored in key order, not in its stream order (readers see them out of order)",
    guarantee: 'G3, G14',
    edits: [{ file: sqliteStore, find: '          claims\n            .filter(', replace: '          [...claims].sort((a, b) => (a.key < b.key ? -1 : 1))\n            .filter(' }],
    caughtBy: [{ file: conformance, name: 'in its stream order, whatever order their keys' }, simulation],
  },
  {
    what: 'compaction removing recorded stream outcomes inside the retention window',
    guarantee: 'G15',
    edits: [
      {
        file: sqliteStore,
        find: 'const outcomes = (await drain(this.statements.compactOutcomes, now - policy.dedupeRetentionMs))',
        replace: 'const outcomes = (await drain(this.statements.compactOutcomes, now))',
      },
      {
        file: postgresStore,
        find: 'SELECT ctid FROM ${sql.table(table)} WHERE created_at < ${now - policy.dedupeRetentionMs}::bigint',
        replace: 'SELECT ctid FROM ${sql.table(table)} WHERE created_at < ${now}::bigint',
      },
    ],
    caughtBy: [{ file: conformance, name: 'keeps the stream outcomes recorded inside the window' }],
  },
  {
    what: 'the token checked on the raw URL instead of on the route it reaches',
    guarantee: 'G17',
    edits: [
      {
        file: 'src/dedupe/auth.ts',
        find: "    if (access === 'public') {\n      markAuthenticated(request.raw.socket);\n      return;\n    }",
        replace: "    if (!request.url.startsWith('/v1/')) {\n      markAuthenticated(request.raw.socket);\n      return;\n    }",
      },
    ],
    caughtBy: [{ file: 'test/integration/auth.test.ts', name: '%761' }, simulation],
  },
  {
    what: "a publish token's producer not checked against the stream it writes",
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/routes/publishing.ts', find: 'if (!producerAllowed(grant, stream.producer)) {', replace: 'if (!producerAllowed(grant, grant.producers)) {' }],
    caughtBy: [{ file: scopedTokens, name: 'cross-producer attack' }, simulation],
  },
  {
    what: "a token's scope not checked against the route it reaches",
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/auth.ts', find: "  if (grant.scope === 'admin' || access === 'any') return true;", replace: '  return true;' }],
    caughtBy: [
      { file: scopedTokens, name: 'lets each scope do what it grants' },
      { file: 'test/integration/auth.test.ts', name: 'wrong scope' },
      simulation,
    ],
  },
  {
    what: "a publish token's asset list not applied to the items it sends",
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/routes/publishing.ts', find: '(asset) => isLifecycleAsset(asset) || assetAllowed(grant, asset), allowed)', replace: '() => true, allowed)' }],
    caughtBy: [{ file: scopedTokens, name: 'item by item' }, simulation],
  },
  {
    what: 'a revoked token still let in',
    guarantee: 'G17',
    edits: [{ file: tokens, find: 'return row && row.revoked_at === null ? grantOfRow(row) : undefined;', replace: 'return row ? grantOfRow(row) : undefined;' }],
    caughtBy: [{ file: scopedTokens, name: 'revoked' }, { file: 'test/unit/tokens.test.ts', name: 'forget' }, simulation],
  },
  {
    what: 'a server whose every token was revoked opened to anyone',
    guarantee: 'G17',
    edits: [{ file: tokens, find: "const row = await this.db.selectFrom('tokens').select('id').limit(1).executeTakeFirst();", replace: "const row = await this.db.selectFrom('tokens').select('id').where('revoked_at', 'is', null).limit(1).executeTakeFirst();" }],
    caughtBy: [{ file: scopedTokens, name: 'after a restart with every token revoked' }, { file: 'test/unit/tokens.test.ts', name: 'keeps asking' }, simulation],
  },
  {
    what: 'tokens stored as they are rather than hashed',
    guarantee: 'G17',
    edits: [{ file: tokens, find: "  return createHash('sha256').update(token).digest('hex');", replace: '  return token;' }],
    caughtBy: [{ file: scopedTokens, name: 'keeps only a hash' }, simulation],
  },
  {
    what: 'the rate limit counted per client address rather than per token',
    guarantee: 'security',
    edits: [{ file: 'src/dedupe/http-app.ts', find: 'keyGenerator: (request) => request.principal,', replace: 'keyGenerator: (request) => request.ip,' }],
    caughtBy: [{ file: scopedTokens, name: 'each token on its own' }],
  },
  {
    what: 'a partition key with NUL or an unpaired surrogate passed on to the store',
    guarantee: 'G8',
    edits: [
      {
        file: 'src/protocol/emission.ts',
        find: '  .refine(isPlainText, { error: PLAIN_TEXT_RULE })\n  .meta({ pattern: PLAIN_TEXT_PATTERN });',
        replace: '  .meta({ pattern: PLAIN_TEXT_PATTERN });',
      },
    ],
    caughtBy: [{ file: conformance, name: 'refuses NUL and unpaired surrogates' }, { file: 'test/unit/emission-validation.test.ts', name: 'partition key with NUL' }],
  },
  {
    what: "the server's connection limits left at Node's defaults (no connection cap)",
    guarantee: 'security',
    edits: [{ file: 'src/dedupe/connections.ts', find: '  server.maxConnections = limits.maxConnections;\n', replace: '' }],
    caughtBy: [{ file: 'test/fault/slow-clients.test.ts', name: 'past the cap' }],
  },
  {
    what: "Node's own refusals (431, 408, 400) answered in Node's words, not problem+json",
    guarantee: 'G8',
    edits: [{ file: 'src/dedupe/http-app.ts', find: '    clientErrorHandler: answerClientError,\n', replace: '' }],
    caughtBy: [{ file: 'test/fault/slow-clients.test.ts', name: 'too large' }],
  },
  {
    what: 'a request body parsed however deep it nests',
    guarantee: 'security',
    edits: [{ file: 'src/dedupe/json-body.ts', find: '  if (nestingDepth(text, maxDepth) > maxDepth) {', replace: '  if (false) {' }],
    caughtBy: [{ file: 'test/fault/amplification.test.ts', name: 'deeper than 64 levels' }],
  },
  {
    what: 'GET /v1/events answering a whole page of large events, however large',
    guarantee: 'security',
    edits: [{ file: 'src/dedupe/routes/reading.ts', find: 'if (wait === 0) return boundedPage(store, query, options.maxPageBytes);', replace: 'if (wait === 0) return store.listEvents(query);' }],
    caughtBy: [{ file: 'test/fault/amplification.test.ts', name: 'within maxPageBytes' }],
  },
  {
    what: 'dedupe keys shared by every producer, so one can squat another\'s next key',
    guarantee: 'G4, security',
    edits: [
      { file: 'src/dedupe/sqlite/migrations.ts', find: 'CREATE UNIQUE INDEX events_by_key ON events (producer, run_slot, filed_partition, key)', replace: 'CREATE UNIQUE INDEX events_by_key ON events (run_slot, filed_partition, key)' },
      { file: 'src/dedupe/sqlite/statements.ts', find: "oc.columns(['producer', 'run_slot', 'filed_partition', 'key']).where('created_at', 'is not', null)", replace: "oc.columns(['run_slot', 'filed_partition', 'key']).where('created_at', 'is not', null)" },
    ],
    caughtBy: [{ file: conformance, name: 'scopes keys by producer' }],
  },
  {
    what: 'any attempt taken, however far above the epoch (one item at attempt 1,000,000 fences a run for good)',
    guarantee: 'G10, security',
    edits: [{ file: ingestPlan, find: '  if (attempt > epoch + maxAttemptStep) {', replace: '  if (false) {' }],
    caughtBy: [{ file: conformance, name: 'refuses an attempt far above' }, simulation],
  },
  {
    what: 'the relay stopping for good when it cannot write to its file (a full disk)',
    guarantee: 'G3',
    edits: [{ file: relay, find: '      if (!isTransientSqliteError(error)) throw error;\n      // Not recorded', replace: '      throw error;\n      // Not recorded' }],
    caughtBy: [{ file: 'test/fault/disk-full.test.ts' }, simulation],
  },
  {
    what: 'each commit numbering from a count of its own instead of the file\'s last sequence number',
    guarantee: 'G12',
    edits: [
      {
        file: 'src/outbox/commit/row-writer.ts',
        find: '    this.nextSeq = nextSeq(file.rows, { runId: run.runId, task: this.task, attempt: run.attempt });',
        replace: '    this.nextSeq = ((file as unknown as { seq?: number }).seq ??= 1);',
      },
    ],
    caughtBy: [{ file: sameFile, name: 'same attempt commit to one file' }, simulation],
  },
  {
    what: "the server's ingest run without `BEGIN` (PostgreSQL)",
    guarantee: 'G4, G13',
    edits: [{ file: 'src/dedupe/postgres/connection.ts', find: "    await client.query('BEGIN');\n", replace: '' }],
    caughtBy: [{ file: conformance, name: 'fails part-way' }],
    postgres: true,
  },
  {
    what: 'the PostgreSQL ingest reads its stream without locking the row (no upsert)',
    guarantee: 'G13',
    edits: [
      {
        file: postgresIngestSteps,
        find: '        const [locked] = await runStatement(client, run.openStream, { ...ofAttempt, ts: clock.ts });',
        replace:
          "        const key = [ofAttempt.producer, ofAttempt.runId, ofAttempt.task];\n" +
          "        await client.query('INSERT INTO streams (producer, run_id, task, epoch, updated_at) VALUES ($1, $2, $3, 0, $4) ON CONFLICT DO NOTHING', [...key, clock.ts]);\n" +
          "        const [locked] = (await client.query('SELECT epoch, false AS fresh FROM streams WHERE producer = $1 AND run_id = $2 AND task = $3', key)).rows;",
      },
    ],
    caughtBy: [{ file: cluster, name: 'same instant' }],
    postgres: true,
  },
  {
    what: "PostgreSQL claiming keys (storing events) without the cursors' lock (an ingest that commits late leaves its event below a cursor a reader has passed; two claiming the same keys in opposite orders deadlock)",
    guarantee: 'G14, G8, G13',
    edits: [{ file: postgresIngestSteps, find: '        if (group === undefined) await runStatement(client, run.lockCursors, { key: this.cursorLock });\n', replace: '' }],
    caughtBy: [
      { file: cluster, name: 'commits after later ones' },
      { file: 'test/store/postgres-store.test.ts', name: 'never deadlocks two ingests' },
    ],
    postgres: true,
  },
  {
    what: 'a PostgreSQL group transaction failing whole for one request that fails (the others refused, though nothing of theirs was wrong)',
    guarantee: 'G8',
    postgres: true,
    edits: [{ file: 'src/dedupe/postgres/ingest-groups.ts', find: '        if (isTransient(error)) throw error;\n', replace: '        throw error;\n' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'arrive together' }],
  },
  {
    what: 'a PostgreSQL group that failed without savepoints not run again with them (every request of it refused)',
    guarantee: 'G8',
    postgres: true,
    edits: [{ file: 'src/dedupe/postgres/ingest-groups.ts', find: '          if (!(error instanceof RequestFailed)) throw error;', replace: '          throw error;' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'arrive together' }],
  },
  {
    what: 'a PostgreSQL group answering its requests in a turn of their own, not sharing one transaction',
    guarantee: 'G8',
    postgres: true,
    edits: [{ file: 'src/dedupe/postgres/ingest-groups.ts', find: '      const group = this.waiting.splice(0, MAX_GROUP);', replace: '      const group = this.waiting.splice(0, 1);' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'arrive together' }],
  },
  {
    what: "PostgreSQL's cursors' lock held by the connection rather than the transaction (released only when the connection closes)",
    guarantee: 'G14',
    edits: [{ file: postgresStatements, find: 'sql<never>`SELECT pg_advisory_xact_lock(${cursorLock.key})`', replace: 'sql<never>`SELECT pg_advisory_lock(${cursorLock.key})`' }],
    caughtBy: [{ file: cluster, name: 'six readers' }],
    postgres: true,
  },
  {
    what: 'a dead row sent again under a new key',
    guarantee: 'G18',
    edits: [{ file: 'src/outbox/file/rows.ts', find: ".set({ id: sql`(SELECT max(id) + 1 FROM outbox)`, ...pendingAgainAs })", replace: ".set({ id: sql`(SELECT max(id) + 1 FROM outbox)`, ...pendingAgainAs, key: sql`lower(hex(randomblob(16)))` })" }],
    caughtBy: [{ file: 'test/integration/dead-letters.test.ts', name: 'however often it is retried' }],
  },
  {
    what: 'delivery failures never reported by the relay',
    guarantee: 'G19',
    edits: [{ file: relay, find: '            this.options.reporter?.deliveryFailed(error);\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/never-silent.test.ts', name: 'with the server down' }],
  },
  {
    what: 'every failure logged again, however often it repeats',
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/relay/reporter.ts', find: '    if (seen && now - seen.at < this.options.repeatMs) {', replace: '    if (seen && now - seen.at < 0) {' }],
    caughtBy: [{ file: 'test/integration/never-silent.test.ts', name: 'with the server down' }, { file: 'test/integration/never-silent.test.ts', name: 'unknown asset' }],
  },
  {
    what: 'close() silent about rows left pending or dead',
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/outbox.ts', find: '    if (result.pending > 0 || result.dead > 0) {\n      // The job', replace: '    if (result.pending < 0) {\n      // The job' }],
    caughtBy: [{ file: 'test/integration/never-silent.test.ts', name: 'with the server down' }],
  },
  {
    what: "ingest results left out of the server's metrics",
    guarantee: 'G19',
    edits: [{ file: 'src/dedupe/routes/publishing.ts', find: '    options.metrics.ingested(results, (performance.now() - started) / 1000);\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/metrics.test.ts', name: 'counters move with the traffic' }],
  },
  {
    what: 'the protocol changed without regenerating docs/openapi.json',
    guarantee: 'docs',
    edits: [{ file: 'src/dedupe/openapi.ts', find: "summary: 'Page the stored events by cursor',", replace: "summary: 'Page the stored events',", }],
    caughtBy: [{ file: 'test/integration/openapi.test.ts', name: 'docs/openapi.json is current' }],
  },
  {
    what: 'a public option documented in the code but not in docs/api',
    guarantee: 'docs',
    edits: [{ file: 'src/outbox/options.ts', find: '  /** How long delivery may fail before it is logged and reported as an \'error\' event. @defaultValue 5000 */\n  reportAfterMs?', replace: '  /** How long delivery may fail before it is logged. @defaultValue 5000 */\n  reportAfterMs?' }],
    caughtBy: [{ file: 'test/integration/api-docs.test.ts' }],
  },
  {
    what: "the emission's trace context left out of the batch the relay sends",
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/relay/batch-encoding.ts', find: "    const traced = row.trace_context === null ? head : `${head.slice(0, -1)},\"trace\":${row.trace_context}}`;", replace: '    const traced = head;' }],
    caughtBy: [{ file: 'test/integration/tracing.test.ts', name: 'from the producer, through the server, to readers' }],
  },
  {
    what: "a consumer's cursor committed on its own before the handler, not with the effect",
    guarantee: 'G20',
    edits: [{ file: 'src/consumer/consumer.ts', find: "    failpoint('consume:before-handler');", replace: "    this.advanceCursor(last);\n    failpoint('consume:before-handler');" }],
    caughtBy: [{ file: 'test/fault/consumer-crash.test.ts', name: 'before the handler applies each effect once on restart' }, simulation],
  },
  {
    what: "a consumer's emission keyed by when it was made, not by the event it responds to",
    guarantee: 'G20',
    edits: [
      {
        file: 'src/outbox/commit/keys.ts',
        find: "return uuidOf(['oncebox/v1/caused', producer, cause.eventId, cause.scope, asset, partitionKey, occurrence]);",
        replace: "return uuidOf(['oncebox/v1/caused', producer, cause.eventId, cause.scope, asset, partitionKey, occurrence, String(process.hrtime.bigint())]);",
      },
    ],
    caughtBy: [{ file: 'test/fault/consumer-crash.test.ts', name: 'after a summary was delivered, before its cursor was' }, simulation],
  },
  {
    what: 'an attempt claim that hands out the epoch it found instead of the next one',
    guarantee: 'G21',
    edits: [{ file: 'src/dedupe/attempt-claim.ts', find: "const wanted = 'exactly' in claim ? claim.exactly : Math.max(epoch + 1, claim.atLeast);", replace: "const wanted = 'exactly' in claim ? claim.exactly : Math.max(epoch, claim.atLeast);" }],
    caughtBy: [
      { file: conformance, name: 'hands out claimed attempts atomically' },
      { file: 'test/fault/consumer-zombie.test.ts', name: 'start at the same instant' },
      simulation,
    ],
  },
  {
    what: "a fenced consumer's relay keeps the lease of a file it shares with its replacement",
    guarantee: 'G21',
    edits: [{ file: 'src/consumer/consumer.ts', find: '      if (error instanceof FencedError) await this.box.relay?.stop();', replace: '' }],
    caughtBy: [{ file: 'test/fault/consumer-zombie.test.ts', name: 'on the same file' }, simulation],
  },
  {
    what: 'a trigger that fires again for a newer event of a partition it fired for',
    guarantee: 'G22',
    edits: [{ file: 'src/consumer/triggers.ts', find: "    if (fired > 0 && this.onNewer === 'ignore') return;", replace: '' }],
    caughtBy: [{ file: 'test/integration/consumer-trigger.test.ts' }, simulation],
  },
  {
    what: "a consumer on a fresh file that does not rebuild its triggers' state",
    guarantee: 'G22',
    edits: [{ file: 'src/consumer/consumer.ts', find: '      await this.catchUpTriggers(signal);', replace: '' }],
    caughtBy: [{ file: 'test/integration/consumer-trigger.test.ts' }, simulation],
  },
  {
    what: "an emission that repeats its lineage's asset and partition accepted",
    guarantee: 'G23',
    edits: [{ file: 'src/dedupe/ingest/lineage.ts', find: 'if (cycleLimit === undefined && ancestors.includes(', replace: 'if (cycleLimit === undefined && ancestors.length < 0 && ancestors.includes(' }],
    caughtBy: [
      { file: conformance, name: 'derives each event' },
      { file: 'test/unit/lineage.test.ts', name: 'refuses a repeat' },
      { file: 'test/integration/consumer.test.ts', name: 'feedback_loop' },
    ],
  },
  {
    what: "a cause the token does not consume accepted (a tenant grafts a lineage onto another's input)",
    guarantee: 'G23',
    edits: [
      {
        file: 'src/dedupe/ingest/lineage.ts',
        find: '    if (!cause ? citesNothing : !mayCite(cause.asset)) {',
        replace: '    if (!cause ? citesNothing : !mayCite(cause.asset) && cause.asset === item.payload.asset) {',
      },
    ],
    caughtBy: [{ file: 'test/integration/lineage-tenants.test.ts', name: 'poison' }, { file: 'test/unit/lineage.test.ts', name: 'may not name' }],
  },
  {
    what: 'the kept lineage grows with the chain (no cap on the ancestors an event stores)',
    guarantee: 'G23',
    edits: [{ file: 'src/dedupe/ingest/lineage.ts', find: '    const ancestors = [...cause.ancestors, ancestorOf(cause.asset, cause.partitionKey)].slice(-LINEAGE_KEPT);', replace: '    const ancestors = [...cause.ancestors, ancestorOf(cause.asset, cause.partitionKey)];' }],
    caughtBy: [{ file: 'test/integration/lineage-tenants.test.ts', name: 'bounds what lineage stores' }, { file: 'test/unit/lineage.test.ts', name: 'LINEAGE_KEPT' }],
  },
  {
    what: 'a chain one emission deeper than its limit accepted',
    guarantee: 'G23',
    edits: [{ file: 'src/dedupe/ingest/lineage.ts', find: '    if (depth > limit) {', replace: '    if (depth > limit + 1) {' }],
    caughtBy: [
      { file: conformance, name: 'derives each event' },
      { file: 'test/unit/lineage.test.ts', name: 'deeper than the limit' },
    ],
  },
  {
    what: 'the Airflow forwarder posts again after a lost answer without looking in Airflow first',
    guarantee: 'G24',
    edits: [{ file: forwarder, find: "        this.mayBePosted = true;\n        failpoint('forward:before-post');", replace: "        this.mayBePosted = false;\n        failpoint('forward:before-post');" }],
    caughtBy: [{ file: airflowForwarder, name: 'lost answers' }, { file: 'test/airflow/chain.test.ts' }, simulation],
  },
  {
    what: 'a forwarder that starts without looking for the events its predecessor posted and did not record',
    guarantee: 'G24',
    edits: [{ file: forwarder, find: '    this.mayBePosted = true;\n    const result', replace: '    this.mayBePosted = false;\n    const result' }],
    caughtBy: [{ file: airflowForwarder, name: 'lost answers' }, simulation],
  },
  {
    what: "the forwarder's Airflow token kept until Airflow refuses it",
    guarantee: 'G24',
    edits: [{ file: 'src/airflow/airflow-client.ts', find: "  if (typeof exp !== 'number') return", replace: "  if (typeof exp !== 'number' || exp > 0) return" }],
    caughtBy: [{ file: airflowForwarder, name: 'renews its token' }, { file: 'test/unit/airflow.test.ts', name: 'renewal time' }],
  },
  {
    what: 'a map entry naming an Airflow asset that does not exist passed over at start',
    guarantee: 'G24',
    edits: [{ file: 'src/airflow/asset-map.ts', find: '    if (!asset) {', replace: '    if (!asset && oncebox === "") {' }],
    caughtBy: [{ file: airflowForwarder, name: 'does not have' }],
  },
  {
    what: "a run's success keyed by its attempt, so that every succeeding attempt counts",
    guarantee: 'G25',
    edits: [{ file: 'src/protocol/lifecycle.ts', find: "outcome === 'succeeded' ? null : attempt]", replace: 'attempt]' }],
    caughtBy: [{ file: lifecycle, name: 'count a run success once' }, simulation],
  },
  {
    what: 'a failure that releases the held emissions instead of discarding them',
    guarantee: 'G25',
    edits: [{ file: 'src/outbox/commit/commit.ts', find: '    if (succeeded) {\n      for (const row of held) {', replace: '    if (succeeded || true) {\n      for (const row of held) {' }],
    caughtBy: [{ file: lifecycle, name: 'discard the held emissions' }, simulation],
  },
  {
    what: "a retry on a fresh machine that does not get back what the lost file held",
    guarantee: 'G25',
    edits: [{ file: 'src/outbox/resume.ts', find: '      restoreHeld(file, run, state.checkpoints[HELD_CHECKPOINT], now);', replace: '      void restoreHeld;' }],
    caughtBy: [{ file: lifecycle, name: 'fresh machine the emissions' }, simulation],
  },
  {
    what: 'a failure callback run twice that records a second failure',
    guarantee: 'G25',
    edits: [{ file: 'src/outbox/outbox.ts', find: '        if (earlier.outcome === terminal.outcome) return { recorded: false, value: undefined };', replace: '' }],
    caughtBy: [{ file: lifecycle, name: 'however often fail is called' }, { file: 'test/fault/lifecycle-crash.test.ts', name: 'inside fail' }, simulation],
  },
  {
    what: 'the server checks a failure notice against the attempt that delivers it, so that a retry which took it over on the same file has it refused',
    guarantee: 'G12, G25',
    edits: [{ file: lifecycleCheck, find: "extra.outcome === 'failed' && extra.attempt > stream.attempt", replace: "extra.outcome === 'failed' && extra.attempt !== stream.attempt" }],
    caughtBy: [
      { file: lifecycleTakeover, name: 'run_failed with a retry to come' },
      { file: lifecycleTakeover, name: '0.1.0 server' },
      { file: model, name: 'the notice of an attempt that ended and died' },
      { file: 'test/fault/lifecycle-crash.test.ts', name: 'before its relay sent the notice' },
      { file: bullmqTest, name: 'before its relay sent it and before BullMQ heard \\(fail' },
      simulation,
    ],
  },
  {
    what: "the server checks a fence notice's fencing attempt against the attempt that delivers it",
    guarantee: 'G12, G25',
    edits: [{ file: lifecycleCheck, find: "extra.outcome === 'fenced' && extra.fencedBy > stream.attempt", replace: "extra.outcome === 'fenced' && extra.fencedBy !== stream.attempt" }],
    caughtBy: [{ file: lifecycleTakeover, name: 'run_fenced' }, { file: model, name: 'delivers a fence notice' }, simulation],
  },
  {
    what: 'the server takes a failure notice of any attempt, a later one than its stream\'s too (a zombie could fail the live attempt)',
    guarantee: 'G17, G25',
    edits: [{ file: lifecycleCheck, find: "extra.outcome === 'failed' && extra.attempt > stream.attempt", replace: "extra.outcome === 'failed' && extra.attempt < 0" }],
    caughtBy: [{ file: scopedTokens, name: 'takes a lifecycle event outside' }, simulation],
  },
  {
    what: "the server takes a fence notice by a later attempt than its stream's (a zombie could fence the live attempt)",
    guarantee: 'G17, G25',
    edits: [{ file: lifecycleCheck, find: "extra.outcome === 'fenced' && extra.fencedBy > stream.attempt", replace: "extra.outcome === 'fenced' && extra.fencedBy < 0" }],
    caughtBy: [{ file: scopedTokens, name: 'takes a lifecycle event outside' }, simulation],
  },
  {
    what: "a failure of an earlier attempt, later in a request than a later attempt's, sets the run's outcome",
    guarantee: 'G25, G27',
    edits: [{ file: 'src/dedupe/ingest/run-outcome.ts', find: 'if (outcome === null || failure.attempt >= outcome.attempt) outcome', replace: 'outcome' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'later attempt said' }, simulation],
  },
  {
    what: "the embedded store lets a failure of an earlier attempt, arriving late, overwrite what a later attempt said of the run",
    guarantee: 'G25, G27',
    edits: [{ file: sqliteStatements, find: "        .where('outcome_attempt', '<=', p.outcome.outcomeAttempt),", replace: '' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'catalog: sqlite.*later attempt said' }, simulation],
  },
  {
    what: "PostgreSQL lets a failure of an earlier attempt, arriving late, overwrite what a later attempt said of the run",
    guarantee: 'G25, G27',
    edits: [{ file: postgresStatements, find: "        .where('outcome_attempt', '<=', runOutcome.outcomeAttempt)", replace: '' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'catalog: postgres.*later attempt said' }, simulation],
    postgres: true,
  },
  {
    what: 'the server takes a lifecycle event under any key, so that a valid-looking one holds the key of another outcome (the run\'s success)',
    guarantee: 'G17, G25',
    edits: [{ file: lifecycleCheck, find: 'if (item.key !== outcomeKey(', replace: 'if (item.key === "" && item.key !== outcomeKey(' }],
    caughtBy: [{ file: scopedTokens, name: 'takes a lifecycle event outside' }, simulation],
  },
  {
    what: "a resume that adopts a later attempt's progress drops the taken-over lifecycle notices with the rest",
    guarantee: 'G25',
    edits: [{ file: fileRows, find: ".where((eb) => eb.or([eb('kind', '<>', sql.lit<RowKind>('event')), eb('asset', 'not in', NOTICES)])),", replace: '' }],
    caughtBy: [{ file: lifecycleTakeover, name: 'server-newer' }],
  },
  {
    what: 'a resume that keeps the lifecycle notices leaves them at their old positions (a gap the relay stops on)',
    guarantee: 'G25',
    edits: [{ file: 'src/outbox/resume.ts', find: 'file.rows.takeOver.run({ id, attempt: run.attempt, seq: seq++ });', replace: 'void seq;' }],
    caughtBy: [{ file: lifecycleTakeover, name: 'server-newer' }],
  },
  {
    what: 'the next attempt does not take over a notice that a 0.1.0 server refused after a takeover',
    guarantee: 'G12, G25',
    edits: [
      {
        file: fileRows,
        find: "            eb.and([eb('state', '=', sql.lit('dead')), eb('dead_code', '=', sql.lit(RejectionCode.InvalidItem)), eb('asset', 'in', NOTICES)]),\n",
        replace: '',
      },
    ],
    caughtBy: [{ file: lifecycleTakeover, name: 'next attempt on the file takes it over' }],
  },
  {
    what: '`oncebox dead retry` keeps a lifecycle notice refused as invalid dead, which the server now takes',
    guarantee: 'G18, G25',
    edits: [{ file: 'src/outbox/file/dead-letters.ts', find: 'wellFormedNotice: producer !== undefined && isWellFormedNotice(producer, row),', replace: 'wellFormedNotice: false,' }],
    caughtBy: [{ file: lifecycleTakeover, name: 'dead retry sends it again' }],
  },
  {
    what: '`oncebox dead retry` sends again a row refused for its content, which the server refuses again',
    guarantee: 'G18, G19',
    edits: [{ file: 'src/protocol/rejection-fixes.ts', find: '  [RejectionCode.InvalidItem]: (place) => ({\n    retry: false,', replace: '  [RejectionCode.InvalidItem]: (place) => ({\n    retry: true,' }],
    caughtBy: [{ file: 'test/integration/dead-letters.test.ts', name: 'refused for its content' }],
  },
  {
    what: '`oncebox dead retry` sends again a lifecycle notice refused for its content (every notice taken as one a 0.1.0 server refused after a takeover)',
    guarantee: 'G18, G19',
    edits: [{ file: 'src/outbox/file/dead-letters.ts', find: 'wellFormedNotice: producer !== undefined && isWellFormedNotice(producer, row),', replace: 'wellFormedNotice: true,' }],
    caughtBy: [{ file: lifecycleTakeover, name: 'refused for its content' }],
  },
  {
    what: 'a retry takes over every lifecycle notice a server refused as invalid, one refused for its content too (refused again at every attempt)',
    guarantee: 'G12, G19',
    edits: [{ file: 'src/outbox/file/run-attempts.ts', find: "row.dead_code !== RejectionCode.InvalidItem || (producer !== undefined && isWellFormedNotice(producer, row))", replace: 'true' }],
    caughtBy: [{ file: lifecycleTakeover, name: 'refused for its content' }],
  },
  {
    what: "a failure's message or code kept as the error gave it: too long a code is refused by the server, a NUL or half an emoji makes `box.fail` throw",
    guarantee: 'G19, G25',
    edits: [{ file: 'src/outbox/commit/commit.ts', find: '{ message, code: toPlainText(code, MAX_FAILURE_CODE) }', replace: '{ message, code }' }],
    caughtBy: [{ file: lifecycle, name: 'whatever the error holds' }],
  },
  {
    what: "the BullMQ adapter's attempt taken from attemptsMade instead of a lock-guarded claim",
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: 'box = await this.open(job, identity, { next: async (floor) => this.takeAttempt(job, token, floor) });', replace: 'box = await this.open(job, identity, (job.attemptsMade + 1) as never);' }],
    caughtBy: [{ file: bullmqTest, name: 'job.retry()' }],
  },
  {
    what: 'an exact attempt claim granted at or below the epoch (a late claim fences the later one that was first)',
    guarantee: 'G21, G26',
    edits: [{ file: 'src/dedupe/attempt-claim.ts', find: "  if ('exactly' in claim && wanted <= epoch) {", replace: "  if ('exactly' in claim && wanted < epoch) {" }],
    caughtBy: [{ file: conformance, name: 'exactly' }, simulation],
  },
  {
    what: 'the BullMQ adapter claims the next attempt whatever lock it holds (a worker paused before its claim fences the live one)',
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: 'box = await this.open(job, identity, { next: async (floor) => this.takeAttempt(job, token, floor) });', replace: "box = await this.open(job, identity, 'claim' as never);" }],
    caughtBy: [{ file: bullmqTest, name: 'between the hand-out and the claim' }],
  },
  {
    what: "the BullMQ adapter's attempt counter raised without checking the job's lock",
    guarantee: 'G26',
    edits: [{ file: 'src/bullmq/job-lock.ts', find: "if ARGV[3] == '1' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end", replace: '' }],
    caughtBy: [{ file: bullmqTest, name: 'between the hand-out and the claim' }],
  },
  {
    what: 'no lock check after the claim: a worker paused after its claim runs the processor once it wakes',
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: "    failpoint('bullmq:after-claim');\n    if ((await this.locks.held(job, token)) === undefined) throw this.letGo(token);", replace: "    failpoint('bullmq:after-claim');" }],
    caughtBy: [{ file: bullmqTest, name: 'after the claim, before the first commit' }],
  },
  {
    what: "a worker that lost the job's lock ends the job in BullMQ's eyes (a refused move, \"Missing lock\") instead of letting it go",
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: '    this.handled.delete(token);\n    return new WaitingError();', replace: "    this.handled.delete(token);\n    return new Error('lost the lock') as WaitingError;" }],
    caughtBy: [{ file: bullmqTest, name: 'after the claim, before the first commit' }, { file: bullmqTest, name: 'before complete()' }],
  },
  {
    what: "a fenced worker that holds the job's lock throws FencedError to BullMQ, which counts it as a failed try",
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: '    if ((await this.locks.held(job, token)) !== undefined) await job.moveToWait(token);\n    return this.letGo(token);', replace: "    if ((await this.locks.held(job, token)) !== undefined) return new Error('fenced') as WaitingError;\n    return this.letGo(token);" }],
    caughtBy: [{ file: bullmqTest, name: 'fenced from outside the adapter' }],
  },
  {
    what: 'a job BullMQ fails without running the processor (stalled more than maxStalledCount) leaves no failure in oncebox',
    guarantee: 'G26',
    edits: [{ file: 'src/bullmq/worker.ts', find: '    void jobs.recordFailureWithoutProcessor(job);', replace: '' }],
    caughtBy: [{ file: bullmqTest, name: 'maxStalledCount' }],
  },
  {
    what: 'willRetry ignores an UnrecoverableError (the held emissions kept for a retry BullMQ will not make)',
    guarantee: 'G26',
    edits: [{ file: 'src/bullmq/outcome.ts', find: "  if (error instanceof UnrecoverableError || (error as Error | null)?.name === 'UnrecoverableError') return false;", replace: '' }],
    caughtBy: [{ file: bullmqTest, name: 'UnrecoverableError is' }],
  },
  {
    what: 'a hand-out that finds the run ended unheard by BullMQ runs the job again',
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: '    if (history.unheardEnd !== undefined) return this.endAgain(job, token, box, identity, history.unheardEnd);', replace: '' }],
    caughtBy: [{ file: bullmqTest, name: 'before BullMQ heard' }],
  },
  {
    what: "the end record ignores the stall count, so a job.retry() after the run's end is refused",
    guarantee: 'G26',
    edits: [{ file: 'src/bullmq/job-record.ts', find: '  return { unheardEnd: stalledSince && record?.end ? record.end : undefined,', replace: '  return { unheardEnd: record?.end ? record.end : undefined,' }],
    caughtBy: [{ file: bullmqTest, name: 'job.retry()' }],
  },
  {
    what: 'a processor that moved its job itself (DelayedError) is recorded as a failed attempt',
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: '    if (isBullmqMove(error)) {', replace: '    if (false as boolean) {' }],
    caughtBy: [{ file: bullmqTest, name: 'RateLimitError' }],
  },
  {
    what: "a run that succeeded, failed by BullMQ for stalling after, is left failed (the listener does not put the job back)",
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: "          await job.retry('failed');\n", replace: '' }],
    caughtBy: [{ file: bullmqTest, name: 'stalled past maxStalledCount' }],
  },
  {
    what: "a job.retry() after a failure for good does not clear the run's end (its next stall is taken for an unheard end)",
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: '    box.commit((tx) => tx.set(jobRecord(box), { stalls: job.stalledCounter, end: null }));\n', replace: '' }],
    caughtBy: [{ file: bullmqTest, name: 'also when that retry is killed' }],
  },
  {
    what: 'a run that failed for good and is tried again after all does not hold what its failure discarded',
    guarantee: 'G25',
    edits: [{ file: 'src/outbox/file/run-attempts.ts', find: '        this.terminal.holdDiscardedAgain.run({ ...run });\n', replace: '' }],
    caughtBy: [{ file: lifecycle, name: 'tried again after all (the same file)' }, simulation],
  },
  {
    what: "a failure for good empties the server's copy of the held emissions (a retry after all on a fresh machine cannot hold them again)",
    guarantee: 'G25',
    edits: [{ file: 'src/outbox/commit/commit.ts', find: 'const value = failsForGood ? heldMirror(discarding, true) : settlesHeld', replace: 'const value = failsForGood ? \'[]\' : settlesHeld' }],
    caughtBy: [{ file: lifecycle, name: 'tried again after all' }, { file: terminalPaths, name: 'fail for good then a retry on a fresh machine' }, simulation],
  },
  {
    what: 'BullMQ told of a job end before the server took it (close with a timeout, then complete)',
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: '      if (Date.now() - started > this.options.closeTimeoutMs) {', replace: '      if (Date.now() - started > this.options.closeTimeoutMs) return true;\n      if (false as boolean) {' }],
    caughtBy: [{ file: bullmqTest, name: 'cannot take yet' }],
  },
  {
    what: 'a job id used again resumes the earlier job of that id (the run id is the job id alone)',
    guarantee: 'G26',
    edits: [{ file: 'src/bullmq/job-identity.ts', find: '  const runId = `${own}${id}@${job.timestamp}`;', replace: '  const runId = `${own}${id}`;' }],
    caughtBy: [{ file: bullmqTest, name: 'used again a new run' }],
  },
  {
    what: "job ids percent-encoded as file names by code unit (two ids share a file)",
    guarantee: 'G26',
    edits: [
      {
        file: 'src/bullmq/job-identity.ts',
        find: '  if (PLAIN.test(name) && name !== \'.\' && name !== \'..\') return name;',
        replace: "  return name.replace(/[^A-Za-z0-9._-]/g, (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`);",
      },
    ],
    caughtBy: [{ file: bullmqTest, name: 'files of their own' }],
  },
  {
    what: 'every hand-out after a delay noted as fencing the one before',
    guarantee: 'G26',
    edits: [{ file: bullmqWorker, find: '    if (history.stalledSince) box.noteFencedPredecessor();', replace: '    box.noteFencedPredecessor();' }],
    caughtBy: [{ file: bullmqTest, name: 'DelayedError' }],
  },
  {
    what: "the BullMQ adapter tells oncebox that no retry is coming after every failure (a retried job's held emissions discarded)",
    guarantee: 'G25, G26',
    edits: [{ file: bullmqWorker, find: '    const willRetry = this.willRetry(job, error, state);', replace: '    const willRetry = false;' }],
    caughtBy: [{ file: bullmqChaos }, simulation],
  },
  {
    what: 'a `__proto__` key in one item of a batch refusing the whole request',
    guarantee: 'G8',
    edits: [{ file: 'src/dedupe/json-body.ts', find: '      if (path !== undefined) items[index] = refusedItem(items[index] as Record<string, unknown>, path);\n', replace: '' }],
    caughtBy: [{ file: conformance, name: 'refuses an item with a __proto__ key on its own' }],
  },
  {
    what: 'a body that is not UTF-8 read with U+FFFD in place of its bad bytes',
    guarantee: 'G8',
    edits: [{ file: 'src/dedupe/json-body.ts', find: '    text = utf8.decode(bytes);', replace: "    text = bytes.toString('utf8');" }],
    caughtBy: [{ file: conformance, name: 'refuses an item with a __proto__ key on its own' }],
  },
  {
    what: 'the CLI relay (not --drain) let exit once idle, its timers unreferenced',
    guarantee: 'G3',
    edits: [{ file: 'src/cli/relay-command.ts', find: '  const keepAlive = setInterval(() => undefined, 60_000);', replace: '  const keepAlive = setTimeout(() => undefined, 0);' }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'runs as a relay until stopped' }, simulation],
  },
  {
    what: "a request's deadline timer unreferenced: a GET whose connection is closed unanswered leaves the event loop empty, and a command ends silently",
    guarantee: 'G3',
    edits: [{ file: 'src/client/fetch-within.ts', find: '  try {\n    const response = await fetch(', replace: '  timer.unref();\n  try {\n    const response = await fetch(' }],
    caughtBy: [{ file: 'test/unit/fetch-within.test.ts', name: 'settles, and holds its process until it does' }],
  },
  {
    what: 'a PostgreSQL the server cannot reach said as the driver says it (a bare connect ECONNREFUSED, with no place and no fix)',
    guarantee: 'G19',
    edits: [{ file: 'src/dedupe/postgres/store.ts', find: '      throw connectFailure(options.connectionString, error);', replace: '      throw error;' }],
    caughtBy: [{ file: 'test/integration/database-unreachable.test.ts', name: 'fails to open with where it tried' }],
  },
  {
    what: 'the commands deaf to ONCEBOX_SERVER (a relay beside a job needs --server spelt out again)',
    guarantee: 'G19',
    edits: [{ file: 'src/cli/arguments.ts', find: '    .env(SERVER_VARIABLE)\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'runs a server, a separate relay process and status, end to end' }],
  },
  {
    what: "a run's attempt given as a string of digits (read from an environment variable) not told to convert it",
    guarantee: 'G8',
    edits: [{ file: 'src/outbox/options.ts', find: "    if (/^\\s*\\d+\\s*$/.test(value)) return", replace: "    if (value === '') return" }],
    caughtBy: [{ file: 'test/unit/options.test.ts', name: 'refuse' }],
  },
  {
    what: '`oncebox status` calling a file whose relay stopped on a refused token healthy (exit 0: the monitor never learns)',
    guarantee: 'G19',
    edits: [{ file: 'src/cli/status-command.ts', find: "status.lastError?.stopped === true && status.lastError.code !== 'lease_lost'", replace: "status.lastError?.stopped === true && status.lastError.code === 'lease_lost'" }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'ends `oncebox relay --drain` refused once' }],
  },
  {
    what: '`oncebox status --max-pending-age` never saying that delivery stalled',
    guarantee: 'G19',
    edits: [{ file: 'src/cli/status-command.ts', find: 'status.oldestPendingAgeMs > maxPendingAgeMs) return', replace: 'status.oldestPendingAgeMs > maxPendingAgeMs && false) return' }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'stalled to `oncebox status --max-pending-age`' }],
  },
  {
    what: '`oncebox relay` refused at its start leaving no word in the file (status shows a healthy file)',
    guarantee: 'G19',
    edits: [{ file: 'src/cli/relay-command.ts', find: '      if (error instanceof OnceboxError) recordRelayError(file, error, true);\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'ends `oncebox relay --drain` refused once' }],
  },
  {
    what: 'a closed outbox reading its status from the closed file (better-sqlite3\'s "The database connection is not open")',
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/outbox.ts', find: '    return this.statusAtClose ?? readStatus(this.file, this.relay);', replace: '    return readStatus(this.file, this.relay);' }],
    caughtBy: [{ file: 'test/integration/consumer.test.ts', name: 'tell their last cursor and status after close()' }],
  },
  {
    what: 'the server stopping without a word (a supervisor cannot tell a stop it asked for from a crash)',
    guarantee: 'G19',
    edits: [{ file: 'src/cli/server-command.ts', find: "  console.log(json ? JSON.stringify({ event: 'stopped' }) : 'oncebox server: stopped');\n", replace: '' }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'runs a server, a separate relay process and status, end to end' }],
  },
  {
    what: "a checkpoint read back without its schema (a new version's changed schema takes the old value as if it were new)",
    guarantee: 'G1, G19',
    edits: [{ file: 'src/checkpoint/checkpoint.ts', find: "    return this.check(JSON.parse(stored), 'stored value', SCHEMA_CHANGED_FIX);", replace: '    return JSON.parse(stored) as T;' }],
    caughtBy: [{ file: 'test/integration/checkpoint-schema.test.ts', name: 'is refused as it was written' }],
  },
  {
    what: '`oncebox dead retry` sending a sequence_reused row again (the server refuses it again: its position is another row\'s)',
    guarantee: 'G18, G19',
    edits: [{ file: 'src/protocol/rejection-fixes.ts', find: '  [RejectionCode.SequenceReused]: (place) => ({\n    retry: false,', replace: '  [RejectionCode.SequenceReused]: (place) => ({\n    retry: true,' }],
    caughtBy: [{ file: 'test/integration/dead-letters.test.ts', name: 'say one remedy per code' }],
  },
  {
    what: "close()'s summary advising `dead retry --all` for every dead row (a key_conflict row, which dead retry keeps dead, too)",
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/leftovers.ts', find: '(${deadRowsAdvice(path, left.deadRows, left.dead).join(\' \')})', replace: '(fix the cause, then oncebox dead retry ${path} --all)' }],
    caughtBy: [{ file: 'test/integration/dead-letters.test.ts', name: 'say one remedy per code' }],
  },
  {
    what: "a job on a timer given a run per minute rather than per day (a re-run of the day starts it again from nothing)",
    guarantee: 'G11',
    edits: [{ file: 'src/outbox/run-identity.ts', find: "options.every === 'day' ? iso.slice(0, 10)", replace: "options.every === 'day' ? iso.slice(0, 16)" }],
    caughtBy: [{ file: 'test/integration/run-identity.test.ts', name: "publishes each day's batches on its day" }],
  },
  {
    what: "a run read from Airflow's context without its try number (every retry claims, and a try that started late is not fenced by the later one)",
    guarantee: 'G10',
    edits: [{ file: 'src/outbox/run-identity.ts', find: "  if (text === undefined) return 'claim';", replace: "  if (text === undefined || variable !== '') return 'claim';" }],
    caughtBy: [{ file: 'test/unit/run-identity.test.ts', name: 'is read from oncebox' }],
  },
  {
    what: 'a read token let through at open (it may read the stream): the job does its work and its relay stops at the first delivery',
    guarantee: 'G17, G19',
    edits: [{ file: 'src/client/server-client.ts', find: "    if (scope?.scope === 'read') {", replace: "    if (scope?.scope === ('none' as string)) {" }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'refuses a read token at openOutbox' }, simulation],
  },
  {
    what: "an asset outside the job's token's list taken at box.asset() (a misspelt asset goes dead at the server while the checkpoint moves past it)",
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/outbox.ts', find: '    assertAssetInScope(parsed.data, this.tokenScope);\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'an asset outside the token' }],
  },
  {
    what: 'a changed payload under a used key at a reused position answered sequence_reused (the same mistake gets another code than on the next attempt)',
    guarantee: 'G5, G19',
    edits: [
      {
        file: 'src/dedupe/ingest/resolve.ts',
        find: "  if (!outcome && existing && item.kind === 'event') return existingKeyResult({ ...item, seq, key }, existing);",
        replace: "  if (!outcome && existing && item.kind === 'event' && existing.fingerprint === item.fingerprint) return existingKeyResult({ ...item, seq, key }, existing);",
      },
    ],
    caughtBy: [{ file: 'test/integration/conflicts.test.ts', name: 'reuses the attempt' }],
  },
  {
    what: '`npm run demo -- --keep` deleting its files all the same (a user cannot look at what it did)',
    guarantee: 'demo',
    edits: [{ file: 'scripts/demo.ts', find: '    if (!kept) rmSync(dir, { recursive: true, force: true });', replace: '    rmSync(dir, { recursive: true, force: true });' }],
    caughtBy: [{ file: 'test/integration/demo.test.ts' }],
  },
  {
    what: '`oncebox relay` told to stop during its start (its token check) running on for good: the abort it waits for came before it listened',
    guarantee: 'G16',
    edits: [{ file: 'src/cli/relay-command.ts', find: '    } else if (!options.signal.aborted) {', replace: '    } else {' }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'while it still asks the server about its token' }],
  },
  {
    what: "a caused event sent again judged anew for its lineage (a retry's duplicate refused once the token's consumes changed)",
    guarantee: 'G4',
    edits: [{ file: 'src/dedupe/ingest/lineage.ts', find: '    if (recorded.has(item.key)) return placement;\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/lineage-tenants.test.ts', name: 'answers a caused event sent again as it was stored' }],
  },
  {
    what: 'a PostgreSQL transaction aborted for a deadlock answered as a 500, not run again',
    guarantee: 'G8, G13',
    postgres: true,
    edits: [{ file: 'src/dedupe/postgres/connection.ts', find: '    retries: TRANSIENT_RETRIES,', replace: '    retries: 0,' }],
    caughtBy: [{ file: 'test/store/postgres-store.test.ts', name: 'aborted for a deadlock' }],
  },
  {
    what: 'a checkpoint revision above 2^31 - 1 let through to PostgreSQL (a 500)',
    guarantee: 'G8',
    postgres: true,
    edits: [{ file: 'src/protocol/wire.ts', find: '  revision: z.number().int().min(1).max(2 ** 31 - 1).optional(),', replace: '  revision: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),' }],
    caughtBy: [{ file: conformance, name: 'takes a checkpoint revision up to' }],
  },
  {
    what: 'a token that consumes nothing told a held cause (forbidden) from a missing one (taken as a root)',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/routes/publishing.ts', find: '      citesNothing: grant.consumes !== null && grant.consumes.length === 0,', replace: '      citesNothing: false,' }],
    caughtBy: [{ file: 'test/integration/lineage-tenants.test.ts', name: "cannot poison a consumer's lineage" }],
  },
  {
    what: "the stream state's checkpoints built by assignment (a checkpoint named __proto__ lost from the answer)",
    guarantee: 'G11',
    edits: [
      {
        file: sqliteStore,
        find: '    const checkpoints: Record<string, unknown> = Object.fromEntries(this.statements.streamCheckpoints.all(params).map((row) => [row.name, JSON.parse(row.value)]));',
        replace: '    const checkpoints: Record<string, unknown> = {};\n    for (const row of this.statements.streamCheckpoints.all(params)) checkpoints[row.name] = JSON.parse(row.value);',
      },
    ],
    caughtBy: [{ file: conformance, name: 'keeps and answers a checkpoint named like an Object property' }],
  },
  {
    what: "refusals naming every asset of the token's list, however long",
    guarantee: 'G17',
    edits: [{ file: 'src/protocol/text.ts', find: '  const shown = names.slice(0, most).map((name) => echo(name)).join', replace: '  const shown = names.map((name) => echo(name)).join' }],
    caughtBy: [{ file: scopedTokens, name: 'refuses, item by item, an event to an asset' }],
  },
  {
    what: "the server keeping every checkpoint name a stream sends (a stream's state without bound)",
    guarantee: 'G8',
    edits: [{ file: ingestPlan, find: '    if (names.size < most) {', replace: '    if (names.size < most || most > 0) {' }],
    caughtBy: [{ file: conformance, name: 'keeps at most 64 checkpoint names per stream' }],
  },
  {
    what: 'the producer defining checkpoints past what the server keeps (refused only at delivery, dead)',
    guarantee: 'G8',
    edits: [{ file: 'src/outbox/checkpoint-names.ts', find: '    if (!this.names.has(parsed.data) && this.names.size >= Limits.maxCheckpointNames - 1) {', replace: '    if (!this.names.has(parsed.data) && this.names.size >= Limits.maxCheckpointNames * 2) {' }],
    caughtBy: [{ file: 'test/unit/checkpoint.test.ts', name: 'are at most 63 names per job' }],
  },
  {
    what: 'trustProxy not handed to the HTTP server (every client behind a proxy barred together)',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/http-app.ts', find: '    ...(options.trustProxy === undefined ? {} : { trustProxy: options.trustProxy }),\n', replace: '' }],
    caughtBy: [{ file: 'test/integration/auth.test.ts', name: 'behind a trusted proxy' }],
  },
  {
    what: 'query numbers coerced (`after=0x10` read as cursor 16, `after=` as 0)',
    guarantee: 'G8',
    edits: [{ file: 'src/dedupe/routes/reading.ts', find: "    const malformed = malformedQueryNumber(request.query, { whole: ['after', 'limit'], decimal: ['wait'] });", replace: '    const malformed = undefined as { message: string; field: string } | undefined;' }],
    caughtBy: [{ file: conformance, name: 'pages events by cursor' }],
  },
  {
    what: 'an attempt claim checked against one shape only (a bad `exactly` told as an unknown field)',
    guarantee: 'G8',
    edits: [
      {
        file: 'src/dedupe/routes/publishing.ts',
        find: "    const chosen = typeof given === 'object' && given !== null && 'exactly' in given ? exactAttemptClaimSchema : nextAttemptClaimSchema;",
        replace: "    const chosen = typeof given === 'object' && given !== null && 'exactly' in given ? nextAttemptClaimSchema : nextAttemptClaimSchema;",
      },
    ],
    caughtBy: [{ file: conformance, name: 'hands out claimed attempts atomically' }],
  },
  {
    what: "404s left out of a token's rate limit",
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/http-app.ts', find: '      app.setNotFoundHandler({ preHandler: app.rateLimit() }, notFound);', replace: '      app.setNotFoundHandler(notFound);' }],
    caughtBy: [{ file: scopedTokens, name: 'limits the requests of each token on its own' }],
  },
  {
    what: "the attempt claim route without its producer check (any publish token fences any producer's run)",
    guarantee: 'G17',
    edits: [
      {
        file: 'src/dedupe/routes/publishing.ts',
        find: '    if (!producerAllowed(request.grant, producer)) {\n      return sendProblem(reply, forbidden(`producer: this token publishes only',
        replace: '    if (false) {\n      return sendProblem(reply, forbidden(`producer: this token publishes only',
      },
    ],
    caughtBy: [{ file: routeScopes, name: 'refuses every caller outside' }],
  },
  {
    what: "the stream state route without its producer check (any stream reader reads every producer's checkpoints)",
    guarantee: 'G17',
    edits: [
      {
        file: 'src/dedupe/routes/reading.ts',
        find: '    if (!producerAllowed(request.grant, producer)) {\n      return sendProblem(reply, forbidden(`producer: this token reads only the streams',
        replace: '    if (false) {\n      return sendProblem(reply, forbidden(`producer: this token reads only the streams',
      },
    ],
    caughtBy: [{ file: routeScopes, name: 'refuses every caller outside' }],
  },
  {
    what: 'metrics read by any read token, with or without reads "metrics"',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/auth.ts', find: "      return grant.scope === 'read' && grant.reads.includes('metrics');", replace: "      return grant.scope === 'read';" }],
    caughtBy: [{ file: routeScopes, name: 'refuses every caller outside' }],
  },
  {
    what: 'a route added that any token may call, outside the scope matrix',
    guarantee: 'G17',
    edits: [
      {
        file: 'src/dedupe/routes/admin.ts',
        find: "  app.get('/v1/tokens', { config: { access: 'admin' } },",
        replace: "  app.get('/v1/debug/streams', { config: { access: 'any' } }, async () => ({ streams: [] }));\n  app.get('/v1/tokens', { config: { access: 'admin' } },",
      },
    ],
    caughtBy: [{ file: routeScopes, name: 'holds a row for every authenticated route' }],
  },
  {
    what: "the grant cache keyed by the token's id, not its whole secret (a forged secret let in while the real grant is cached)",
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/auth.ts', find: '    const hash = hashToken(token);', replace: '    const hash = tokenId(token) ?? hashToken(token);' }],
    caughtBy: [{ file: forgedTokens, name: 'refuses a wrong secret for a real id' }],
  },
  {
    what: 'a token looked up by its id, not the hash of its secret',
    guarantee: 'G17',
    edits: [{ file: tokens, find: ".where('hash', '=', hashToken(token)).executeTakeFirst();", replace: ".where('id', '=', tokenId(token)!).executeTakeFirst();" }],
    caughtBy: [{ file: forgedTokens, name: 'refuses a wrong secret for a real id' }],
  },
  {
    what: 'a cached grant trusted for good (a revocation elsewhere never seen)',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/auth.ts', find: '    if (cached && Date.now() < cached.until) return cached.grant;', replace: '    if (cached) return cached.grant;' }],
    caughtBy: [{ file: forgedTokens, name: 'refuses a wrong secret for a real id' }],
  },
  {
    what: "a revoked token's row taken as live",
    guarantee: 'G17',
    edits: [{ file: tokens, find: '    return row && row.revoked_at === null ? grantOfRow(row) : undefined;', replace: '    return row ? grantOfRow(row) : undefined;' }],
    caughtBy: [{ file: forgedTokens, name: 'refuses a wrong secret for a real id' }],
  },
  {
    what: 'a key conflict raised at commit only while the first row is pending (a delivered or dead row taken as the same emission)',
    guarantee: 'G5',
    edits: [
      {
        file: 'src/outbox/commit/row-writer.ts',
        find: '    if (existing.fingerprint !== fingerprint) throw keyConflict(existing, handle, emission.userKey);',
        replace: "    if (existing.fingerprint !== fingerprint && existing.state === 'pending') throw keyConflict(existing, handle, emission.userKey);",
      },
    ],
    caughtBy: [{ file: conflicts, name: 'once the first row was delivered' }, { file: conflicts, name: 'while the first row is dead' }],
  },
  {
    what: "the partition date left out of a payload's fingerprint",
    guarantee: 'G5',
    edits: [
      {
        file: 'src/protocol/canonical-json.ts',
        find: '  const head = JSON.stringify([payload.asset, payload.partitionKey ?? null, payload.partitionDate ?? null]);',
        replace: '  const head = JSON.stringify([payload.asset, payload.partitionKey ?? null, null]);',
      },
    ],
    caughtBy: [{ file: conflicts, name: 'another payload .partitionDate.' }],
  },
  {
    what: "the server answering another payload under a stored key as that key's duplicate",
    guarantee: 'G5',
    edits: [{ file: 'src/dedupe/ingest/resolve.ts', find: '  if (existing.fingerprint === item.fingerprint) {\n    return { status: \'duplicate\'', replace: '  if (existing.fingerprint !== undefined) {\n    return { status: \'duplicate\'' }],
    caughtBy: [{ file: conflicts, name: 'once the delivered row was pruned' }],
  },
  {
    what: "the relay taking a server's conflict answer as delivered",
    guarantee: 'G5',
    edits: [
      { file: answers, find: "      case 'rejected':\n      case 'conflict':", replace: "      case 'rejected':" },
      { file: answers, find: "      case 'checkpointed':", replace: "      case 'conflict':\n      case 'checkpointed':" },
    ],
    caughtBy: [{ file: conflicts, name: 'once the delivered row was pruned' }],
  },
  {
    what: 'the epoch moved only by a request that stores a new event (a retry of only duplicates, checkpoints or refusals fences nothing)',
    guarantee: 'G10',
    edits: [
      {
        file: 'src/dedupe/ingest/resolve.ts',
        find: '    epoch: tookPositions && context.attempt > context.epoch ? context.attempt : null,',
        replace: '    epoch: events.length > 0 && context.attempt > context.epoch ? context.attempt : null,',
      },
    ],
    caughtBy: [{ file: conformance, name: 'fences the zombie once a retry delivered a first request' }, simulation],
  },
  {
    what: 'the epoch moved by new events and checkpoints, but not by duplicates or refusals',
    guarantee: 'G10',
    edits: [
      {
        file: 'src/dedupe/ingest/resolve.ts',
        find: '    epoch: tookPositions && context.attempt > context.epoch ? context.attempt : null,',
        replace: '    epoch: events.length + checkpoints.size > 0 && context.attempt > context.epoch ? context.attempt : null,',
      },
    ],
    caughtBy: [
      { file: conformance, name: 'fences the zombie once a retry delivered a first request holding only duplicates' },
      { file: conformance, name: 'fences the zombie once a retry delivered a first request holding only an item refused' },
      simulation,
    ],
  },
  {
    what: "the epoch moved only when the request's positions hold an accepted item (a refusal's position fences nothing)",
    guarantee: 'G10',
    edits: [
      {
        file: 'src/dedupe/ingest/resolve.ts',
        find: '    epoch: tookPositions && context.attempt > context.epoch ? context.attempt : null,',
        replace: "    epoch: tookPositions && results.some((r) => r.status !== 'rejected') && context.attempt > context.epoch ? context.attempt : null,",
      },
    ],
    caughtBy: [{ file: conformance, name: 'fences the zombie once a retry delivered a first request holding only an item refused' }, simulation],
  },
  {
    what: "the server's copy of the held emissions cleared by a failure that will be retried (a retry on a fresh machine never releases them)",
    guarantee: 'G25',
    edits: [
      {
        file: 'src/outbox/commit/commit.ts',
        find: "    const settlesHeld = this.terminal !== undefined && !(this.terminal.outcome === 'failed' && this.terminal.willRetry);",
        replace: '    const settlesHeld = this.terminal !== undefined;',
      },
    ],
    caughtBy: [{ file: terminalPaths, name: 'fail with a retry to come then a retry on a fresh machine' }],
  },
  {
    what: 'the held emissions discarded in the file by a failure that will be retried',
    guarantee: 'G25',
    edits: [
      {
        file: 'src/outbox/commit/commit.ts',
        find: "      if (!keepsHeld) file.terminal.settleHeld.run({ ...runKey, state: succeeded ? 'released' : 'discarded',",
        replace: "      if (keepsHeld || !keepsHeld) file.terminal.settleHeld.run({ ...runKey, state: succeeded ? 'released' : 'discarded',",
      },
    ],
    caughtBy: [{ file: terminalPaths, name: 'fail with a retry to come then a retry on the same file' }],
  },
  {
    what: "a checkpoint read from the file by its name alone (a new run, or another task, reads another's progress)",
    guarantee: 'G1, G12',
    edits: [
      {
        file: 'src/outbox/file/checkpoints.ts',
        find: '        .where((eb) => eb.and({ run_id: checkpointOf.runId, task: checkpointOf.task, name: checkpointOf.name })),',
        replace: '        .where((eb) => eb.and({ name: checkpointOf.name })),',
      },
    ],
    caughtBy: [
      { file: multiTask, name: 'in one outbox file' },
      { file: multiTask, name: 'starts a new run from scratch' },
      { file: 'test/fault/crash.test.ts', name: 'while another task of the run commits to the same file' },
    ],
  },
  {
    what: "a file taken as not fresh for a task's retry because another task wrote checkpoints to it (no resume from the server)",
    guarantee: 'G11',
    edits: [
      {
        file: 'src/outbox/resume.ts',
        find: 'file.checkpoints.runHasCheckpoint.get(runKeyOf(run)) === undefined;',
        replace: "file.db.prepare('SELECT 1 FROM checkpoints LIMIT 1').get() === undefined;",
      },
    ],
    caughtBy: [{ file: multiTask, name: 'only another task wrote to' }],
  },
  {
    what: "the server's stream state reading the checkpoints of every task of the run",
    guarantee: 'G11',
    edits: [
      {
        file: sqliteStatements,
        find: "    streamCheckpoints: prepare(db, stream, q.selectFrom('stream_checkpoints').select(['name', 'value']).where((eb) => eb.and(ofStream)).orderBy('name')),",
        replace: "    streamCheckpoints: prepare(db, stream, q.selectFrom('stream_checkpoints').select(['name', 'value']).where((eb) => eb.and({ producer: stream.producer, run_id: stream.runId })).orderBy('name')),",
      },
    ],
    caughtBy: [{ file: multiTask, name: 'keep their own positions' }, { file: model, name: 'per task' }],
  },
  {
    what: "the relay cutting a batch across two tasks' rows (one task's events sent as the other's)",
    guarantee: 'G3',
    edits: [{ file: 'src/outbox/relay/batches.ts', find: '    if (row.run_id !== first!.run_id || row.task !== first!.task || row.attempt !== first!.attempt) {', replace: '    if (row.run_id !== first!.run_id || row.attempt !== first!.attempt) {' }],
    caughtBy: [{ file: multiTask, name: 'in one outbox file' }, simulation],
  },
  {
    what: 'the relay ending a batch inside a commit that fits in one (a lost machine leaves half a commit on the server: its events without its checkpoint)',
    guarantee: 'G11',
    edits: [{ file: 'src/outbox/relay/batches.ts', find: '      const carried = sameCommit(batch.at(-1)!, row) ? batch.splice(commitStart(batch)) : [];', replace: '      const carried: OutboxRow[] = [];' }],
    caughtBy: [{ file: 'test/unit/batches.test.ts' }],
  },
  {
    what: 'the relay sending a last commit the fetch may have cut, beside whole ones',
    guarantee: 'G11',
    edits: [{ file: 'src/outbox/relay/batches.ts', find: '    if (start > 0) batch.splice(start);', replace: '    if (start > 0) batch.splice(batch.length);' }],
    caughtBy: [{ file: 'test/unit/batches.test.ts', name: 'fetch may have cut' }],
  },
  {
    what: "the embedded store reading a stream's epoch from any task of the run (one task's retry fences the others)",
    guarantee: 'G10, G13',
    edits: [
      {
        file: sqliteStatements,
        find: "    epoch: prepare(db, stream, q.selectFrom('streams').select('epoch').where((eb) => eb.and(ofStream))),",
        replace: "    epoch: prepare(db, stream, q.selectFrom('streams').select('epoch').where((eb) => eb.and({ producer: stream.producer, run_id: stream.runId })).orderBy('epoch', 'desc')),",
      },
    ],
    caughtBy: [{ file: model, name: 'on a file it shares with another task' }, simulation],
  },
  {
    what: "the embedded store reading an attempt's last position without its task (one task's sequence taken for another's)",
    guarantee: 'G3, G10',
    edits: [
      {
        file: sqliteStatements,
        find: "    lastSeq: prepare(db, attempt, q.selectFrom('stream_seqs').select('last_seq').where((eb) => eb.and(ofAttempt))),",
        replace: "    lastSeq: prepare(db, attempt, q.selectFrom('stream_seqs').select('last_seq').where((eb) => eb.and({ producer: stream.producer, run_id: stream.runId, attempt: attempt.attempt })).orderBy('last_seq', 'desc')),",
      },
    ],
    caughtBy: [{ file: model, name: 'retries every task of a shared file' }, simulation],
  },
  {
    what: "a terminal commit settling the held emissions of every task of the run on the file (the other task's success releases nothing)",
    guarantee: 'G25, G12',
    edits: [{ file: 'src/outbox/file/terminal-statements.ts', find: ".where('run_id', '=', p.settle.runId)\n        .where('task', '=', p.settle.task)\n", replace: ".where('run_id', '=', p.settle.runId)\n" }],
    caughtBy: [{ file: sharedFileTasks, name: 'each release their own held emissions' }],
  },
  {
    what: "an attempt's outcome read without its task (another task's success taken as this task's: its complete() records nothing)",
    guarantee: 'G25, G12',
    edits: [{ file: 'src/outbox/file/terminal-statements.ts', find: "        .where('run_id', '=', p.attempt.runId)\n        .where('task', '=', p.attempt.task)\n", replace: "        .where('run_id', '=', p.attempt.runId)\n" }],
    caughtBy: [{ file: sharedFileTasks, name: 'each release their own held emissions' }],
  },
  {
    what: "a fenced attempt's rows parked across every task of the run (another task's pending rows refused)",
    guarantee: 'G10, G12',
    edits: [
      {
        file: fileRows,
        find: "        .where('state', '=', sql.lit('pending'))\n        .where((eb) => eb.and(ofAttempt))\n        .returning('id'),",
        replace: "        .where('state', '=', sql.lit('pending'))\n        .where((eb) => eb.and({ run_id: attempt.runId, attempt: attempt.attempt }))\n        .returning('id'),",
      },
    ],
    caughtBy: [{ file: sharedFileTasks, name: 'parks nothing of the other task' }, simulation],
  },
  {
    what: "a retry taking over the older attempts' pending rows of every task of the run on the file",
    guarantee: 'G10, G12',
    edits: [
      {
        file: 'src/outbox/file/rows.ts',
        find: "        .where((eb) => eb.and(ofRun))\n        .where('attempt', '<', attempt.attempt)",
        replace: "        .where('run_id', '=', attempt.runId)\n        .where('attempt', '<', attempt.attempt)",
      },
    ],
    caughtBy: [{ file: sharedFileTasks, name: 'takes over none of another task' }, { file: model, name: 'on a file it shares with another task' }, simulation],
  },
  {
    what: "pruning keeping one newest row per run's attempt, not per task (a task's stream numbers from 1 again)",
    guarantee: 'G3, G12',
    edits: [{ file: 'src/outbox/file/rows.ts', find: ".groupBy(['run_id', 'task', 'attempt'])", replace: ".groupBy(['run_id', 'attempt'])" }],
    caughtBy: [{ file: sharedFileTasks, name: 'pruning keeps each task' }, simulation],
  },
  {
    what: 'a held emission released under a newly derived key instead of the one it was committed with',
    guarantee: 'G25',
    edits: [{ file: 'src/outbox/commit/commit.ts', find: '          held: false,\n          preset: { key: row.key, scope: row.key_scope },\n', replace: '          held: false,\n' }],
    caughtBy: [{ file: heldRelease, name: 'released under the key they were committed with' }],
  },
  {
    what: 'the discarded emissions held again whenever an attempt opens the file, not only a later attempt',
    guarantee: 'G25',
    edits: [
      {
        file: 'src/outbox/file/run-attempts.ts',
        find: "        if ((opened ?? 0) >= attempt) return { lastWriter, adopted: 0 };\n        s.openRun.run({ ...run, attempt });\n        // A later attempt after a failure for good: the run is tried again after all, and what that\n        // failure discarded is held again for the success this attempt may make.\n        this.terminal.holdDiscardedAgain.run({ ...run });\n",
        replace: "        this.terminal.holdDiscardedAgain.run({ ...run });\n        if ((opened ?? 0) >= attempt) return { lastWriter, adopted: 0 };\n        s.openRun.run({ ...run, attempt });\n",
      },
    ],
    caughtBy: [{ file: heldRelease, name: 'stay discarded when the attempt that failed for good' }],
  },
  {
    what: 'a taken position resent with its key and another payload answered as a duplicate (the other payload dropped in silence)',
    guarantee: 'G5',
    edits: [
      {
        file: 'src/dedupe/ingest/resolve.ts',
        find: "  if (!outcome && existing && item.kind === 'event') return existingKeyResult({ ...item, seq, key }, existing);",
        replace: "  if (!outcome && existing && item.kind === 'event') return { status: 'duplicate', seq, key, eventId: existing.eventId, timestamp: existing.ts };",
      },
    ],
    caughtBy: [{ file: hostileReview, name: 'a taken position resent with its key and another payload' }],
  },
  {
    what: "a token revoked through an instance left in that instance's grant cache (let in until the cache time passes)",
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/routes/admin.ts', find: '    options.auth.forget();\n', replace: '' }],
    caughtBy: [{ file: hostileReview, name: 'revoked through this instance at once' }],
  },
  {
    what: "a second revocation overwriting the first one's time",
    guarantee: 'G17',
    edits: [{ file: tokens, find: ".where('id', '=', id).where('revoked_at', 'is', null).execute();", replace: ".where('id', '=', id).execute();" }],
    caughtBy: [{ file: hostileReview, name: 'revoked twice' }],
  },
  {
    what: "the stream state route checking the producer of publish tokens only (a stream reader of one producer reads every producer's checkpoints)",
    guarantee: 'G17',
    edits: [
      {
        file: 'src/dedupe/routes/reading.ts',
        find: '    if (!producerAllowed(request.grant, producer)) {\n      return sendProblem(reply, forbidden(`producer: this token reads only the streams',
        replace: "    if (request.grant.scope === 'publish' && !producerAllowed(request.grant, producer)) {\n      return sendProblem(reply, forbidden(`producer: this token reads only the streams",
      },
    ],
    caughtBy: [{ file: hostileReview, name: 'stream reader of one producer' }],
  },
  {
    what: "an emission's key derived without its task (another task's event for the same partition answered as a duplicate)",
    guarantee: 'G3, G4',
    edits: [{ file: 'src/outbox/commit/keys.ts', find: '      identity.runId,\n      identity.task,\n', replace: '      identity.runId,\n' }],
    caughtBy: [{ file: multiTask, name: 'its own event for a partition both emit' }, simulation],
  },
  {
    what: 'a relay stepped by hand that lost its lease failing every later step instead of asking for the lease again',
    guarantee: 'G3',
    edits: [{ file: relay, find: '      if (error instanceof LeaseLostError) this.holding = false;\n', replace: '' }],
    caughtBy: [{ file: model, name: 'takes it back at its next step' }, simulation],
  },
  {
    what: "a trigger's rebuild on a fresh file restoring its arrivals but not its firings (a re-run's newer event fires a partition again)",
    guarantee: 'G22',
    edits: [
      {
        file: 'src/consumer/triggers.ts',
        find: '    s.saveFiring.run({ ...at, fired: firing, lastCursor: event.cursor, now: Date.now() });',
        replace: '    if (!context.replay) s.saveFiring.run({ ...at, fired: firing, lastCursor: event.cursor, now: Date.now() });',
      },
    ],
    caughtBy: [{ file: triggerTest, name: 'remembers its firings through a rebuild' }, { file: 'test/fault/trigger-crash.test.ts', name: 'before the handler of a completing event' }, simulation],
  },
  {
    what: "a trigger's rebuild running the handler again for the partitions it replays",
    guarantee: 'G22',
    edits: [{ file: 'src/consumer/triggers.ts', find: '    if (!context.replay) {', replace: '    if (context.replay || !context.replay) {' }],
    caughtBy: [{ file: triggerTest, name: 'remembers its firings through a rebuild' }, simulation],
  },
  {
    what: 'every firing of a partition counted as its first (a refresh reuses the first firing\'s keys and is lost as a duplicate)',
    guarantee: 'G22',
    edits: [{ file: 'src/consumer/triggers.ts', find: '    const firing = fired + 1;', replace: '    const firing = 1;' }],
    caughtBy: [{ file: triggerTest, name: 'fires a refresh, never a first firing again' }, simulation],
  },
  {
    what: "PostgreSQL raising the epoch of every task of a run (one task's retry fences the other task)",
    guarantee: 'G10, G13',
    postgres: true,
    edits: [
      {
        file: postgresStatements,
        find: "      db.updateTable('streams').set({ epoch: epoch.epoch, updated_at: epoch.ts }).where((eb) => eb.and(where(epoch))).compile(),",
        replace: "      db.updateTable('streams').set({ epoch: epoch.epoch, updated_at: epoch.ts }).where((eb) => eb.and({ producer: epoch.producer, run_id: epoch.runId })).compile(),",
      },
    ],
    caughtBy: [{ file: cluster, name: 'keeps two tasks of one run apart across instances' }, simulation],
  },
  {
    what: "a refusal's field repeating the client's keys whole (stored, and answered again to every retry)",
    guarantee: 'G8',
    edits: [
      { file: 'src/dedupe/json-body.ts', find: '    const found = reservedKeyPath(value[key], `${path}.${echo(key)}`);', replace: '    const found = reservedKeyPath(value[key], `${path}.${key}`);' },
      { file: ingestPlan, find: '  return { detail: echo(item.detail, MAX_REFUSAL_DETAIL), field: echo(item.field, MAX_REFUSAL_FIELD) };', replace: '  return { detail: item.detail, field: item.field };' },
    ],
    caughtBy: [{ file: conformance, name: 'refuses an item with a __proto__ key on its own' }],
  },
  {
    what: 'a type-only import cycle (the run attempts typed by the file that builds them)',
    guarantee: 'layers',
    edits: [
      {
        file: 'src/outbox/file/run-attempts.ts',
        find: "import type { TerminalStatements } from './terminal-statements.js';",
        replace: "import type { TerminalStatements } from './terminal-statements.js';\nimport type { OutboxFile } from './outbox-file.js';\nexport type RunsOf = OutboxFile['runs'];",
      },
    ],
    caughtBy: [{ file: 'test/unit/layers.test.ts' }],
  },
  {
    what: "the producer importing the server's types",
    guarantee: 'layers',
    edits: [{ file: 'src/outbox/status.ts', find: "import type { OutboxFile } from './file/outbox-file.js';", replace: "import type { OutboxFile } from './file/outbox-file.js';\nimport type { DedupeStore } from '../dedupe/store.js';\nexport type StatusStore = DedupeStore;" }],
    caughtBy: [{ file: 'test/unit/layers.test.ts' }],
  },
  {
    what: 'the typed checkpoint importing the producer (no longer a leaf)',
    guarantee: 'layers',
    edits: [
      {
        file: 'src/checkpoint/checkpoint.ts',
        find: "import { CheckpointValidationError } from '../protocol/errors.js';",
        replace: "import { CheckpointValidationError } from '../protocol/errors.js';\nimport type { OutboxFile } from '../outbox/file/outbox-file.js';\nexport type CheckpointFile = OutboxFile;",
      },
    ],
    caughtBy: [{ file: 'test/unit/layers.test.ts' }],
  },
  {
    what: "the relay's request body leaving out an event's partition date",
    guarantee: 'G3',
    edits: [{ file: 'src/outbox/relay/batch-encoding.ts', find: "      ...(row.partition_date === null ? {} : { partitionDate: row.partition_date }),\n", replace: '' }],
    caughtBy: [{ file: 'test/unit/batch-encoding.test.ts' }, simulation],
  },
  {
    what: "the relay's request body sending a coalesced checkpoint update without its revision",
    guarantee: 'G11',
    edits: [{ file: 'src/outbox/relay/batch-encoding.ts', find: 'const revision = row.revision === 0 ?', replace: 'const revision = row.revision >= 0 ?' }],
    caughtBy: [{ file: 'test/unit/batch-encoding.test.ts' }],
  },
  {
    what: 'a 401 or 403 retried like a server that is down (the relay and every command wait forever)',
    guarantee: 'G19',
    edits: [{ file: 'src/client/server-client.ts', find: '    if (answer.status === 401 || answer.status === 403) return credentialsRefused(', replace: '    if (answer.status === 0) return credentialsRefused(' }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'ends `oncebox relay --drain`' }, { file: 'test/integration/credentials.test.ts', name: 'stops a running relay at once' }],
  },
  {
    what: "openOutbox not asking whether the server takes the job's token (a wrong token found only after the first commit)",
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/outbox.ts', find: '      this.tokenScope = await assertStreamToken(this.client, this.producer, run, this.options.requestTimeoutMs);', replace: '      void assertStreamToken(this.client, this.producer, run, this.options.requestTimeoutMs);' }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'is refused at openOutbox' }],
  },
  {
    what: '`oncebox events --follow` retrying a refused token forever',
    guarantee: 'G19',
    edits: [{ file: 'src/cli/events-command.ts', find: '      if (!command.follow || error instanceof CredentialsError) {', replace: '      if (!command.follow) {' }],
    caughtBy: [{ file: 'test/integration/credentials.test.ts', name: 'ends openConsumer' }],
  },
  {
    what: 'an idle consumer never asking for its group’s epoch (a replaced consumer with no events runs on forever)',
    guarantee: 'G21',
    edits: [{ file: 'src/consumer/consumer.ts', find: '        if (events.length === 0) await this.box.learnFenceFromServer();', replace: '' }],
    caughtBy: [{ file: 'test/fault/consumer-zombie.test.ts', name: 'at the end of a long-poll' }, simulation],
  },
  {
    what: "a map entry's URI looked up without Airflow's normal form of an empty path (`ceo://refunds` not found as `ceo://refunds/`)",
    guarantee: 'G24',
    edits: [{ file: 'src/airflow/airflow-client.ts', find: "  path = path.replace(/\\/+$/, '') || '/';", replace: "  path = path.replace(/\\/+$/, '');" }],
    caughtBy: [{ file: 'test/airflow/uri-forms.test.ts' }],
  },
  {
    what: 'a publish token that consumes some assets reading every asset’s events',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/tokens.ts', find: "  return grant.scope === 'read' ? grant.assets : (grant.consumes ?? []);", replace: "  return grant.scope === 'read' ? grant.assets : null;" }],
    caughtBy: [{ file: 'test/integration/route-scopes.test.ts', name: 'refuses every caller outside' }],
  },
  {
    what: "the server taking the jobs' ONCEBOX_TOKEN as its admin token",
    guarantee: 'G17',
    edits: [{ file: 'src/cli/server-command.ts', find: '  const fromEnvironment = process.env[ADMIN_TOKEN_VARIABLE]?.trim();', replace: '  const fromEnvironment = (process.env[ADMIN_TOKEN_VARIABLE] ?? process.env[TOKEN_VARIABLE])?.trim();' }],
    caughtBy: [{ file: 'test/integration/first-hour.test.ts', name: 'never ONCEBOX_TOKEN' }],
  },
  {
    what: '`oncebox status` exiting 0 with events dead',
    guarantee: 'G19',
    edits: [{ file: 'src/cli/status-command.ts', find: '  if (status.dead > 0) return StatusExit.Dead;', replace: '' }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'end to end' }],
  },
  {
    what: "the testing kit's checker blind to an event published twice",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/history.ts', find: '    } else if (have > want) {', replace: '    } else if (have > want + 1) {' }],
    caughtBy: [{ file: 'test/testing/history.test.ts', name: 'finds duplicated' }],
  },
  {
    what: "the testing kit's harness never arming the kill point (every planned kill a clean run)",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/attempts.ts', find: "      ? `${FAILPOINT_OF[end.at]}@${end.hit}`\n", replace: '      ? undefined\n' }],
    caughtBy: [{ file: 'test/testing/harness.test.ts', name: 'kills a producer' }],
  },
  {
    what: "the testing kit reporting the first failing scenario, not the one fast-check shrank it to",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/check-job.ts', find: '      if (!outcome.ok) failed = outcome;', replace: '      if (!outcome.ok) failed ??= outcome;' }],
    caughtBy: [{ file: 'test/testing/wrong-jobs.test.ts', name: 'random scenarios only' }],
  },
  {
    what: "the testing kit's checker calling a lost event's run done whatever its checkpoint says",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/history.ts', find: '  const done = expected.checkpoints !== undefined && canonicalJson(', replace: '  const done = true || canonicalJson(' }],
    caughtBy: [{ file: 'test/testing/history.test.ts', name: 'tells lost events' }],
  },
  {
    what: 'the catalog not counting a retried delivery the server absorbed as a duplicate',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/ingest/resolve.ts', find: "    if (result.status === 'duplicate' && 'item' in placement && placement.item.kind === 'event') return [", replace: "    if (result.status === 'missing' as string && 'item' in placement && placement.item.kind === 'event') return [" }],
    caughtBy: [
      { file: 'test/store/catalog.test.ts', name: 'the zombie fenced, the retry absorbed' },
      { file: 'test/console/console.test.ts', name: "the retry's duplicates absorbed" },
    ],
  },
  {
    what: 'the catalog calling a fenced attempt current',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/rows.ts', find: '      fencedBy: attempt >= epoch ? null :', replace: '      fencedBy: attempt >= 0 ? null :' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'the zombie fenced by the retry' }],
  },
  {
    what: "a consumer group's lag counted from the start of the log, not from its cursor",
    guarantee: 'G27',
    edits: [{ file: catalogLag, find: 'question.assets.map((asset) => JSON.stringify([asset, Math.min(question.cursor, upTo)]))', replace: 'question.assets.map((asset) => JSON.stringify([asset, Math.min(0, upTo)]))' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'consumer groups with their lag' }, { file: catalogBounds, name: 'counts every group' }],
  },
  {
    what: "a group's lag counted without its mark's ordinal (as if every event before the mark came after the cursor)",
    guarantee: 'G27',
    edits: [{ file: catalogLag, find: 'figure.ordinal - Number(row.mark_ordinal ?? 0)', replace: 'figure.ordinal - 0' }],
    caughtBy: [{ file: catalogBounds, name: 'counts every group' }],
  },
  {
    what: "a group's lag not bounded by what retention left (events removed after its cursor still counted)",
    guarantee: 'G27',
    edits: [{ file: catalogLag, find: 'const past = Math.min(figure.ordinal - Number(row.mark_ordinal ?? 0), figure.stored) - Number(row.n);', replace: 'const past = figure.ordinal - Number(row.mark_ordinal ?? 0) - Number(row.n);' }],
    caughtBy: [{ file: catalogBounds, name: 'counts every group' }],
  },
  {
    what: "the rollup marking no event (a group's lag counted over every event of an asset up to its cursor: a read that grows with the backlog)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/rollup.ts', find: '    .where(sql<number>`(${ordinal}) % ${sql.lit(MARK_EVERY)}`, \'=\', 0)) as', replace: '    .where(sql<number>`(${ordinal}) % ${sql.lit(MARK_EVERY)}`, \'=\', -1)) as' }],
    caughtBy: [{ file: catalogBounds, name: 'catalog bounds: sqlite.*counts every group' }],
  },
  {
    what: "a group's cursor of any value taken (3.5 or -1e20: a 500 on PostgreSQL, a wrong lag on SQLite)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/item-check.ts', find: 'if (parsed.data.name === CONSUMER_CURSOR_CHECKPOINT && !isCursor(parsed.data.value)) {', replace: 'if (parsed.data.name === CONSUMER_CURSOR_CHECKPOINT && !isCursor(0)) {' }],
    caughtBy: [{ file: catalogBounds, name: "keeps a group's asset list" }],
  },
  {
    what: "retention removing events by their stamp alone (after a clock stepped back, a younger event goes before an older one, and a group's lag counts what is gone)",
    guarantee: 'G15, G27',
    edits: [
      { file: sqliteStatements, find: 'WHERE cursor < coalesce((SELECT min(cursor) FROM head WHERE ts >= ${p.compactStamped.cutoff}), 9223372036854775807)`.compile(q),', replace: 'WHERE ts < ${p.compactStamped.cutoff}`.compile(q),' },
    ],
    caughtBy: [{ file: catalogBounds, name: 'catalog bounds: sqlite.*clock stepped back' }],
  },
  {
    what: "a stream's summary listing every attempt (a run whose attempts jumped by thousands: an item of megabytes, built in quadratic time)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/stream-summaries.ts', find: "eb('attempt', '>', row.epoch - ATTEMPTS_LISTED)", replace: "eb('attempt', '>', 0)" }],
    caughtBy: [{ file: catalogBounds, name: 'attempts jumped by thousands' }],
  },
  {
    what: "a catalog page's bytes counted as UTF-16 units (three times the bound in CJK text)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/page.ts', find: '    bytes += Buffer.byteLength(JSON.stringify(item));', replace: '    bytes += JSON.stringify(item).length;' }],
    caughtBy: [{ file: catalogBounds, name: 'answers a list in pages bounded' }],
  },
  {
    what: "a page cursor's attempt taken past what a store keeps (a forged one a 500 on PostgreSQL)",
    guarantee: 'G8, G27',
    postgres: true,
    edits: [{ file: 'src/dedupe/catalog/catalog.ts', find: 'z.number().int().min(0).max(2 ** 31 - 1)', replace: 'z.number()' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'catalog: postgres.*pages the refusals' }],
  },
  {
    what: 'the refusals of both tables merged in code, in an order other than the database compares a page cursor in (refusals skipped when paging)',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/rows.ts', find: "  return ordered.reduce((select, column) => select.orderBy(column, 'desc'), merged).limit(limit);", replace: "  return merged.limit(limit);" }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'pages the refusals in one order' }],
  },
  {
    what: "one reader's catalog reads taking every waiting place (a token looping shuts the other tenants out)",
    guarantee: 'G17, G27',
    edits: [{ file: 'src/dedupe/catalog/gate.ts', find: '    if (mine.length >= CATALOG_QUEUE_PER_READER) return Promise.reject(new CatalogQueueFullError(true));', replace: '' }],
    caughtBy: [{ file: 'test/unit/catalog-gate.test.ts', name: 'past its share' }],
  },
  {
    what: 'the catalog taking waiting readers first come, first served (a reader with many reads waiting goes before another)',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/gate.ts', find: '    if (mine.length > 0) this.rotation.push(reader);', replace: '    if (mine.length > 0) this.rotation.unshift(reader);' }],
    caughtBy: [{ file: 'test/unit/catalog-gate.test.ts', name: 'takes readers in turn' }],
  },
  {
    what: 'a connection that asks only for public routes (a health check) closed for showing no token',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/auth.ts', find: "    if (access === 'public') {\n      markAuthenticated(request.raw.socket);\n      return;\n    }", replace: "    if (access === 'public') return;" }],
    caughtBy: [{ file: 'test/fault/slow-clients.test.ts', name: 'only asks for public routes' }, simulation],
  },
  {
    what: "a group's asset list stored as the client sent it (a name a thousand times: a thousand counts a read)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/item-check.ts', find: '    value = canonicalJson([...new Set(assets.data)].sort());', replace: '    void assets;' }],
    caughtBy: [{ file: catalogBounds, name: "keeps a group's asset list" }],
  },
  {
    what: "a group's asset list of any length taken",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/item-check.ts', find: '.refine((names) => new Set(names).size <= Limits.maxGroupAssets)', replace: '.refine((names) => names.length >= 0)' }],
    caughtBy: [{ file: catalogBounds, name: "keeps a group's asset list" }],
  },
  {
    what: 'the consumer taking a group of any number of assets',
    guarantee: 'G27',
    edits: [{ file: 'src/consumer/options.ts', find: '.refine((assets) => new Set(assets).size <= Limits.maxGroupAssets, {', replace: '.refine((assets) => assets.length >= 0, {' }],
    caughtBy: [{ file: 'test/integration/consumer.test.ts', name: 'refuses at open a group of more assets' }],
  },
  {
    what: 'a catalog page of as many items as `limit` asks (1,000 streams of long checkpoints: a page of tens of MiB)',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/catalog.ts', find: "    const after = decodePageCursor(query.after, streamKey);\n    const limit = Math.min(query.limit, CATALOG_PAGE_ROWS);", replace: "    const after = decodePageCursor(query.after, streamKey);\n    const limit = query.limit;" }],
    caughtBy: [{ file: catalogBounds, name: 'answers a list in pages bounded' }],
  },
  {
    what: 'a catalog page not held to its bytes',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/page.ts', find: '    if (shown > 0 && bytes > maxBytes) break;', replace: '    if (shown > 0 && bytes < 0) break;' }],
    caughtBy: [{ file: catalogBounds, name: 'answers a list in pages bounded' }],
  },
  {
    what: 'a list of streams showing each checkpoint whole (values of 64 KiB each, on every row)',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/catalog.ts', find: 'rows.slice(0, limit), staleBefore, CHECKPOINT_PREVIEW_CHARS);', replace: 'rows.slice(0, limit), staleBefore, undefined && CHECKPOINT_PREVIEW_CHARS);' }],
    caughtBy: [{ file: catalogBounds, name: 'answers a list in pages bounded' }],
  },
  {
    what: "the embedded store's catalog reads on the server's own connection (every read holds the event loop: publishers and /healthz wait)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/sqlite-database.ts', find: '    this.reader = db.memory ? undefined : new SqliteReader(db.name);', replace: '    this.reader = db.memory || true ? undefined : new SqliteReader(db.name);' }],
    caughtBy: [{ file: catalogBounds, name: 'answers /healthz before catalog reads' }],
  },
  {
    what: "PostgreSQL's catalog reads on the publishers' pool",
    guarantee: 'G27',
    postgres: true,
    edits: [{ file: postgresStore, find: '    this.catalogDb = new PostgresCatalogDatabase(catalogPool,', replace: '    this.catalogDb = new PostgresCatalogDatabase(pool,' }],
    caughtBy: [{ file: catalogBounds, name: 'publishes beside 40 catalog reads' }],
  },
  {
    what: "the catalog's reads all at once, for as long as readers ask (a loop of readers takes the publishers' CPU)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/gate.ts', find: '      this.nextStartAt = ended + (ended - started) * (1 / CATALOG_DUTY - 1);', replace: '      this.nextStartAt = ended;' }],
    caughtBy: [{ file: 'test/unit/catalog-gate.test.ts', name: 'one read at a time' }],
  },
  {
    what: 'the lag gauge counted again at every scrape',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/cached-figure.ts', find: '    if (this.now() - this.computedAt >= this.everyMs) {', replace: '    if (this.now() - this.computedAt >= 0) {' }],
    caughtBy: [{ file: 'test/unit/cached-figure.test.ts' }],
  },
  {
    what: "a group's lag counted over every asset it names, whatever the reader's token reads (moved with the cursor, it tells where another tenant's events are)",
    guarantee: 'G17, G27',
    edits: [{ file: 'src/dedupe/routes/catalog.ts', find: '  return { assets: mayReadEvents(request.grant) ? readableAssets(request.grant) : [], producers: request.grant.producers };', replace: '  return { assets: mayReadEvents(request.grant) || true ? readableAssets(request.grant) : [], producers: request.grant.producers };' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'scopes every list by the token' }],
  },
  {
    what: "any token that reads events noting another group's last fetch by naming it",
    guarantee: 'G17, G27',
    edits: [{ file: 'src/dedupe/routes/reading.ts', find: "const mayActAsGroup = request.grant.scope === 'admin' || (request.grant.scope === 'publish' &&", replace: "const mayActAsGroup = true || (request.grant.scope === 'publish' &&" }],
    caughtBy: [{ file: routeScopes, name: "note another group's fetch" }, { file: 'test/store/catalog.test.ts', name: 'scopes every list by the token' }],
  },
  {
    what: 'no cap on the connections of one address (600 half-sent requests take every connection)',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/connections.ts', find: '    if (limits.maxConnectionsPerAddress > 0 && held > limits.maxConnectionsPerAddress) {', replace: '    if (limits.maxConnectionsPerAddress > 0 && held < 0) {' }],
    caughtBy: [{ file: 'test/fault/slow-clients.test.ts', name: '600 half-sent requests' }, simulation],
  },
  {
    what: 'a connection that never presents a token held until the header timeout',
    guarantee: 'G17',
    edits: [{ file: 'src/dedupe/connections.ts', find: '      if (!authenticated.has(socket)) answerOnSocket(', replace: '      if (authenticated.has(socket) && false) answerOnSocket(' }],
    caughtBy: [{ file: 'test/fault/slow-clients.test.ts', name: '600 half-sent requests' }, simulation],
  },
  {
    what: 'a refusal at a position another key holds (sequence_reused) not listed with the rejections',
    guarantee: 'G19, G27',
    edits: [{ file: 'src/dedupe/ingest/resolve.ts', find: "          unplaced.push({ seq, key, status: result.status, code: result.code, detail: result.detail, field: result.status === 'rejected' ? (result.field ?? null) : null });", replace: '          void unplaced;' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'lists every refusal a relay parks' }],
  },
  {
    what: 'a request refused whole (attempt_too_high) not listed with the rejections',
    guarantee: 'G19, G27',
    edits: [{ file: 'src/dedupe/ingest/steps.ts', find: "    else yield { op: 'unplaced', refusals: withSubjects(items, unplacedOutcomes(refusal)), clock };", replace: '' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'lists every refusal a relay parks' }],
  },
  {
    what: 'a consumer whose signal aborts going on to the end of the page it fetched',
    guarantee: 'G20',
    edits: [{ file: 'src/consumer/consumer.ts', find: '          if (signal?.aborted) break;\n          if (unit.length === 0) continue;', replace: '          if (unit.length === 0) continue;' }],
    caughtBy: [{ file: 'test/integration/consumer.test.ts', name: 'stops after the event in hand' }, simulation],
  },
  {
    what: 'the console showing a long name whole (a 200-character asset name makes the overview 3,900 px wide)',
    guarantee: 'G27',
    edits: [{ file: 'console/src/styles.css', find: 'td bdi.text, th bdi.text { max-width: 36ch; }', replace: 'td bdi.text, th bdi.text { max-width: none; overflow: visible; }' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'keeps every view within the window' }],
  },
  {
    what: "the console leaving a value's direction open (an unclosed right-to-left override in a key turns the console's words around it)",
    guarantee: 'G27',
    edits: [{ file: 'console/src/styles.css', find: 'bdi.text { unicode-bidi: isolate;', replace: 'bdi.text { unicode-bidi: normal;' }, { file: 'console/src/components/text.tsx', find: '    <bdi class=', replace: '    <span class=' }, { file: 'console/src/components/text.tsx', find: '    </bdi>', replace: '    </span>' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'keeps every view within the window' }],
  },
  {
    what: "the console's path and query read by a listener each (a move to another run asks for it with the old run's task)",
    guarantee: 'G27',
    edits: [
      {
        file: 'console/src/hash-location.ts',
        find: "addEventListener('hashchange', () => {\n  current = fragment();\n  for (const reader of readers) reader();",
        replace:
          "addEventListener('hashchange', () => {\n  current = [fragment()[0], current[1]];\n  for (const reader of readers) reader();\n  setTimeout(() => {\n    current = fragment();\n    for (const reader of readers) reader();\n  });",
      },
    ],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'moves from one run to another' }],
  },
  {
    what: "a request with no lifecycle event saving its run's outcome as none (a failed run shown running after a re-send)",
    guarantee: 'G27',
    edits: [{ file: sqliteStore, find: 'if (writes.runOutcome !== null) s.saveRunOutcome.run(', replace: 'if (true) s.saveRunOutcome.run(' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: "keeps a run's failure through the requests that follow it" }],
  },
  {
    what: "PostgreSQL: a request with no lifecycle event saving its run's outcome as none (a failed run shown running after a re-send)",
    guarantee: 'G27',
    postgres: true,
    edits: [{ file: postgresIngestSteps, find: 'if (writes.runOutcome !== null) await runStatement(client, run.saveRunOutcome,', replace: 'if (true) await runStatement(client, run.saveRunOutcome,' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: "keeps a run's failure through the requests that follow it" }],
  },
  {
    what: "oncebox relay --drain recounting the file's rows every 100 ms whatever the count costs (over a million rows the relay stood still most of the time)",
    guarantee: 'drain',
    edits: [{ file: 'src/cli/drain-tally.ts', find: 'Math.max(MIN_RECOUNT_MS, (this.countedAt - started) / RECOUNT_SHARE)', replace: 'MIN_RECOUNT_MS' }],
    caughtBy: [{ file: 'test/unit/drain-tally.test.ts', name: 'recounts a costly file only as often' }],
  },
  {
    what: 'oncebox relay --drain taking its last count after the relay stopped, not the count that found nothing pending (a job committing meanwhile: "interrupted", exit 1)',
    guarantee: 'drain',
    edits: [{ file: 'src/cli/relay-command.ts', find: '  const end = drained ?? counts();', replace: '  const end = counts();' }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'drains what a job commits while it runs' }],
  },
  {
    what: "the drain's progress blind to what the job commits between two counts (0 pending while rows wait)",
    guarantee: 'drain',
    edits: [{ file: 'src/cli/drain-tally.ts', find: '    const committed = this.file.eventsAfter(this.newestId);', replace: '    const committed = 0;' }],
    caughtBy: [{ file: 'test/unit/drain-tally.test.ts', name: 'counts what the job commits between two counts' }],
  },
  {
    what: '--server taking any text (a misspelt URL: a relay retrying an address that can never answer, or "drained" with nothing pending)',
    guarantee: 'cli',
    edits: [{ file: 'src/cli/arguments.ts', find: '    if (!isServerUrl(url)) {', replace: '    if (false) {' }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'refuses unknown flags and commands' }],
  },
  {
    what: 'the drain\'s progress not moved on by the rows the relay settled between two counts',
    guarantee: 'drain',
    edits: [{ file: 'src/cli/drain-tally.ts', find: "      if (row.state === 'delivered') this.deliveredSince++;", replace: "      if (row.state === 'delivered') continue;" }],
    caughtBy: [{ file: 'test/unit/drain-tally.test.ts', name: 'recounts a costly file only as often' }],
  },
  {
    what: "a consumer group's reads never written down as its last fetch",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/routes/reading.ts', find: 'await fetchNotes.note(groupProducer ?? group, group);', replace: 'void group;' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'consumer groups with their lag' }],
  },
  {
    what: "the console putting the read token in the request's URL",
    guarantee: 'G27',
    edits: [{ file: 'console/src/api.ts', find: '    response = await fetch(apiUrl(route), {', replace: "    response = await fetch(`${apiUrl(route)}${route.includes('?') ? '&' : '?'}token=${token}`, {" }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'keeps the token out of URLs' }, simulation],
  },
  {
    what: 'the console keeping the token in local storage, where it outlives the tab',
    guarantee: 'G27',
    edits: [{ file: 'console/src/session.tsx', find: '    sessionStorage.setItem(KEY, next);', replace: '    localStorage.setItem(KEY, next);' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'keeps the token out of URLs' }, simulation],
  },
  {
    what: "the console rendering every one of an asset's partitions (no virtualisation)",
    guarantee: 'G27',
    edits: [{ file: 'console/src/use-virtual-rows.ts', find: '    overscan: 12,', replace: '    overscan: 100_000,' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'stays quick with 10,000 partitions' }],
  },
  {
    what: 'the console ignoring the long-poll (views change only on reload)',
    guarantee: 'G27',
    edits: [
      { file: 'console/src/live.tsx', find: "            bump({ newest: after, state: 'live' });", replace: "            setLive((now) => ({ ...now, newest: after!, state: 'live' }));" },
      { file: 'console/src/live.tsx', find: '    const timer = setInterval(() => bump({}), REFRESH_MS);', replace: '    const timer = setInterval(() => undefined, REFRESH_MS);' },
    ],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'updates a view through the long-poll' }, simulation],
  },
  {
    what: "the console dropping a route's query (a shared link to a task's run shows nothing)",
    guarantee: 'G27',
    edits: [{ file: 'console/src/hash-location.ts', find: "const currentSearch = (now: [string, string]) => now[1];", replace: "const currentSearch = (now: [string, string]) => now[1].slice(0, 0);" }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'shows a run as the API does' }, simulation],
  },
  {
    what: "the testing kit stopping, continuing and killing only a job's wrapper script, not its process group",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/attempts.ts', find: '      process.kill(-child.pid!, signal);', replace: '      child.kill(signal);' }],
    caughtBy: [{ file: 'test/testing/check-job.test.ts', name: 'wrapper script' }],
  },
  {
    what: "the testing kit bundling a TypeScript job with the bundle's own import.meta.url (a file read from beside the job is not found)",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/bundle.ts', find: '    plugins: [ownModuleUrls],', replace: '    plugins: [],' }],
    caughtBy: [{ file: 'test/testing/bundle.test.ts' }],
  },
  {
    what: 'the testing kit going straight to random scenarios, without the single kills',
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/check-job.ts', find: "  const sweep = path === undefined && options.singleKills !== false && options.scenarios === undefined ? singleKills(scenarioOptions) : [];", replace: '  const sweep: Scenario[] = [];' }],
    caughtBy: [{ file: 'test/testing/wrong-jobs.test.ts', name: 'with a single kill' }],
  },
  {
    what: "the testing kit's checker comparing each of several events of one identity with the first",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/history.ts', find: '    if (clean === undefined || clean.has(payload(event))) continue;', replace: '    if (clean === undefined || [...clean][0] === payload(event)) continue;' }],
    caughtBy: [{ file: 'test/testing/history.test.ts', name: 'several events of one identity' }],
  },
  {
    what: 'the testing kit judging scenarios against a job whose clean runs differ',
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/check-job.ts', find: '  if (rerun.ok) return;', replace: '  return;' }],
    caughtBy: [
      { file: 'test/testing/check-job.test.ts', name: 'two clean runs differ' },
      { file: 'test/testing/wrong-jobs.test.ts', name: 'in its two clean runs' },
    ],
  },
  {
    what: "the console signing its user out on any 403, a link to another producer's run included",
    guarantee: 'G27',
    edits: [{ file: 'console/src/api.ts', find: '    return this.status === 401;', replace: '    return this.status === 401 || this.status === 403;' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'a view the token may not read' }, simulation],
  },
  {
    what: 'the console crashing on a link with a malformed escape',
    guarantee: 'G27',
    edits: [{ file: 'console/src/main.tsx', find: '    return decodeURIComponent(text);\n  } catch {\n    return null;\n  }', replace: '    return decodeURIComponent(text);\n  } finally {\n    // nothing\n  }' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'malformed escape' }, simulation],
  },
  {
    what: 'the catalog passing a forged page key with NUL to PostgreSQL (a 500)',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/page-cursor.ts', find: '  if (!key.success || !(key.data as unknown[]).every(isStorable)) {', replace: '  if (!key.success) {' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'never 5xx' }],
  },
  {
    what: "oncebox ls printing a publisher's control characters to the terminal",
    guarantee: 'G27',
    edits: [{ file: 'src/cli/ls-command.ts', find: '  output.push(...rows.map((row) => row.map((cell) => printable(String(cell)))));', replace: '  output.push(...rows.map((row) => row.map((cell) => String(cell))));' }],
    caughtBy: [{ file: 'test/integration/ls-command.test.ts' }],
  },
  {
    what: "a consumer group's lag counting events of assets the reader may not read",
    guarantee: 'G27, G17',
    edits: [{ file: 'src/dedupe/catalog/consumer-groups.ts', find: 'all.filter((asset) => scope.assets === null || scope.assets.includes(asset))', replace: 'all.filter((asset) => scope.assets === null || true || scope.assets.includes(asset))' }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'scopes every list' }],
  },
  {
    what: 'a failpoint that throws instead of killing when its stdout is closed',
    guarantee: 'testing kit',
    edits: [{ file: 'src/failpoints/failpoints.ts', find: '  try {\n    writeSync(1, `${JSON.stringify(notice)}\\n`);\n  } catch {\n    // Nobody is listening: the kill or stop still happens.\n  }', replace: '  writeSync(1, `${JSON.stringify(notice)}\\n`);' }],
    caughtBy: [{ file: 'test/unit/failpoints.test.ts' }],
  },
  {
    what: "the testing kit's checker ordering events across the tasks of a run, which have no order between them (a false alarm on a correct two-task job)",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/history.ts', find: 'const ofTask = (events: Publication[]) => events.filter((event) => (event.task ?? null) === task);', replace: 'const ofTask = (events: Publication[]) => events;' }],
    caughtBy: [{ file: 'test/testing/history.test.ts', name: 'within each task' }],
  },
  {
    what: "the testing kit's report missing the line that names a system error (`Error: ENOENT: …` names no class of its own)",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/attempts.ts', find: '(Uncaught )?([A-Z]\\w*)?(Error|Exception)', replace: '(Uncaught )?[A-Z]\\w*(Error|Exception)' }],
    caughtBy: [{ file: 'test/testing/check-job.test.ts', name: 'names an attempt' }],
  },
  {
    what: "the testing kit's data folder left for the job to make (a job that writes its first file fails in the clean run)",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/run-scenario.ts', find: '    mkdirSync(data);\n', replace: '' }],
    caughtBy: [{ file: 'test/testing/check-job.test.ts', name: 'data folder' }],
  },
  {
    what: "the testing kit's commit errors never injected (a job that skips a batch whose commit threw passes)",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/attempts.ts', find: "? `${FAILPOINT_OF['inside-commit']}@${end.hit}:throw=${end.error}`", replace: '? undefined' }],
    caughtBy: [{ file: 'test/testing/wrong-jobs.test.ts', name: 'skips the batch' }],
  },
  {
    what: 'a failpoint that announces its SQLite error but never throws it (the batch is written, and a job that would skip it passes)',
    guarantee: 'testing kit',
    edits: [{ file: 'src/failpoints/failpoints.ts', find: "      throw Object.assign(new Error(SQLITE_ERRORS[point.throws]), { name: 'SqliteError', code: point.throws });", replace: '      continue;' }],
    caughtBy: [{ file: 'test/unit/failpoints.test.ts', name: 'inside the commit' }, { file: 'test/testing/wrong-jobs.test.ts', name: 'skips the batch' }],
  },
  {
    what: "the testing kit replaying a random failure by its seed and path, which draw another scenario when the clean run passed a point another number of times",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/check-job.ts', find: 'throw new JobCheckError(failed, seed, counterexample, foundIn, details.numShrinks, scenarioReplay(failed.scenario));', replace: 'throw new JobCheckError(failed, seed, counterexample, foundIn, details.numShrinks, `ONCEBOX_TESTING_SEED=${seed} ONCEBOX_TESTING_PATH=${counterexample}`);' }],
    caughtBy: [{ file: 'test/testing/wrong-jobs.test.ts', name: 'random scenarios only' }],
  },
  {
    what: "the testing kit never comparing a consumer's declared effects (one written after ctx.commit passes)",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/history.ts', find: 'if (expected.effects !== undefined && actual.effects !== undefined) anomalies.push', replace: 'if (expected.effects === null) anomalies.push' }],
    caughtBy: [{ file: 'test/testing/wrong-jobs.test.ts', name: 'declared effect' }],
  },
  {
    what: "the testing kit never killing a consumer just after ctx.commit returned, inside its handler",
    guarantee: 'testing kit',
    edits: [{ file: 'src/testing/scenario.ts', find: "['consumer-before-handler', 'inside-commit', 'after-commit', 'consumer-after-commit', 'after-delivery']", replace: "['consumer-before-handler', 'inside-commit', 'consumer-after-commit', 'after-delivery']" }],
    caughtBy: [{ file: 'test/testing/wrong-jobs.test.ts', name: 'declared effect' }],
  },
  // Bugs where two features meet, caught by the whole-system simulation alone (its own seeds, no other test named).
  {
    what: "the console showing a server's sentence as it is (a link's run id with an unclosed right-to-left override turns the words of the refusal after it)",
    guarantee: 'G27',
    edits: [{ file: 'console/src/components/status.tsx', find: '        {withVisibleControls(error.message)} <code>', replace: '        {error.message} <code>' }],
    caughtBy: [{ file: 'test/console/console.test.ts', name: 'keeps every view within the window' }, simulation],
  },
  {
    what: "a group commit that judges every request of the group by the first request's token (another tenant's consumer may not cite its cause)",
    guarantee: 'G17, G20',
    edits: [{ file: sqliteStore, find: 'return { results: this.ingestTransaction(request.stream, request.items, request.scope) };', replace: 'return { results: this.ingestTransaction(request.stream, request.items, group[0]!.scope) };' }],
    caughtBy: [simulation],
  },
  {
    what: "compaction that leaves the count of an event at the rollup's own position (the newest counted) in its asset's total",
    guarantee: 'G15, G27',
    edits: [{ file: 'src/dedupe/catalog/rollup.ts', find: 'Number(row.cursor) <= upTo', replace: 'Number(row.cursor) < upTo' }],
    caughtBy: [simulation],
  },
  {
    what: "compaction that never lowers an asset's count of partitions",
    guarantee: 'G15, G27',
    edits: [{ file: 'src/dedupe/catalog/rollup.ts', find: '    if (left.length === 0) {', replace: '    if (left.length < 0) {' }],
    caughtBy: [simulation],
  },
  {
    what: "a group's lag counted from the asset's ordinal alone, so that events compaction removed still count",
    guarantee: 'G15, G27',
    edits: [{ file: catalogLag, find: 'const past = Math.min(figure.ordinal - Number(row.mark_ordinal ?? 0), figure.stored) - Number(row.n);', replace: 'const past = figure.ordinal - Number(row.mark_ordinal ?? 0) - Number(row.n);' }],
    caughtBy: [simulation],
  },
  {
    what: 'a dead row sent again (the printed fix of a misspelt asset) under its old position in the stream',
    guarantee: 'G18, G19',
    edits: [{ file: 'src/outbox/file/dead-letters.ts', find: 'const moved = this.file.rows.moveDeadToEnd.get({ id: row.id, attempt, seq })!;', replace: 'const moved = this.file.rows.moveDeadToEnd.get({ id: row.id, attempt, seq: row.seq })!;' }],
    caughtBy: [simulation],
  },
  {
    what: "a resume that adopts a later attempt's progress on a shared file forgetting the held emissions of the run's other tasks",
    guarantee: 'G11, G25',
    edits: [{ file: 'src/outbox/file/terminal-statements.ts', find: "forgetHeldOfRun: prepare(db, p.run, q.deleteFrom('held_emissions').where('run_id', '=', p.run.runId).where('task', '=', p.run.task)),", replace: "forgetHeldOfRun: prepare(db, p.run, q.deleteFrom('held_emissions').where('run_id', '=', p.run.runId)),"  }],
    caughtBy: [simulation],
  },
  {
    what: "the server taking a failure notice only of an attempt before the delivering one (off by one: every attempt's own failure refused)",
    guarantee: 'G19, G25',
    edits: [{ file: lifecycleCheck, find: "extra.outcome === 'failed' && extra.attempt > stream.attempt", replace: "extra.outcome === 'failed' && extra.attempt >= stream.attempt" }],
    caughtBy: [simulation],
  },
  {
    what: "the server taking a fence notice only by an attempt before the delivering one (off by one: a retry's own fence of its zombie refused)",
    guarantee: 'G19, G25',
    edits: [{ file: lifecycleCheck, find: "extra.outcome === 'fenced' && extra.fencedBy > stream.attempt", replace: "extra.outcome === 'fenced' && extra.fencedBy >= stream.attempt" }],
    caughtBy: [simulation],
  },
  {
    what: "a newer attempt on the same file leaving its predecessors' lifecycle notices to them (they are fenced with their attempt and never delivered)",
    guarantee: 'G12, G25',
    edits: [{ file: 'src/outbox/file/run-attempts.ts', find: '          .filter((row) => row.dead_code !== RejectionCode.InvalidItem ||', replace: "          .filter((row) => row.asset === null || !row.asset.startsWith('oncebox.run_'))\n          .filter((row) => row.dead_code !== RejectionCode.InvalidItem ||" }],
    caughtBy: [simulation],
  },
  {
    what: "PostgreSQL's group commit judging every request of a group by the first request's token (another tenant's consumer may not cite its cause)",
    guarantee: 'G17, G20',
    postgres: true,
    edits: [
      {
        file: 'src/dedupe/postgres/ingest-groups.ts',
        find: 'outcomes.push({ results: await runIngest(this.plan(request), this.steps.stepHandler(client, request.stream, request.items, state)) });',
        replace: 'outcomes.push({ results: await runIngest(this.plan({ ...request, scope: group[0]!.scope }), this.steps.stepHandler(client, request.stream, request.items, state)) });',
      },
    ],
    caughtBy: [simulation],
  },
  {
    what: 'a relay stopped by a refused token leaving the receipts awaited before it waiting (a job awaiting its batch hangs instead of failing with the fix)',
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/outbox.ts', find: '        if (endsReceipts(error)) this.waiters.rejectAll(error);\n', replace: '' }],
    caughtBy: [simulation],
  },
  {
    what: 'a relay stopped for good by anything but a refused token leaving the receipts awaited waiting (after an old backup is restored, a job awaiting its batch hangs instead of failing with stream_state_lost)',
    guarantee: 'G19',
    edits: [
      {
        file: 'src/outbox/outbox.ts',
        find: '        if (endsReceipts(error)) this.waiters.rejectAll(error);\n',
        replace: "        if ((error as { code?: string }).code === 'unauthorized' || (error as { code?: string }).code === 'forbidden') this.waiters.rejectAll(error);\n",
      },
    ],
    caughtBy: [{ file: 'test/integration/delivery.test.ts', name: 'relay runs on its own' }, simulation],
  },
  {
    what: 'a receipt asked for after the relay stopped on a refused token waiting for a delivery that will never come',
    guarantee: 'G19',
    edits: [{ file: 'src/outbox/outbox.ts', find: "    if (row.state === 'pending' && stopped !== undefined && endsReceipts(stopped)) return Promise.reject(stopped);\n", replace: '' }],
    caughtBy: [simulation],
  },
  {
    what: 'the relay retrying a refused token (401, 403) with backoff, forever, as if the server were down',
    guarantee: 'G19',
    edits: [
      {
        file: 'src/outbox/relay/relay.ts',
        find: 'shouldRetry: ({ error }) => error instanceof DeliveryError,',
        replace: 'shouldRetry: ({ error }) => error instanceof DeliveryError || [401, 403].includes((error as { status?: number }).status ?? 0),',
      },
    ],
    caughtBy: [simulation],
  },
  {
    what: "a file's record of a run's attempts read by run, not by task (one task's retry on a shared file fences the other task's live attempt)",
    guarantee: 'G10, G12',
    edits: [
      {
        file: 'src/outbox/file/run-attempts.ts',
        find: "getRun: prepare(db, run, q.selectFrom('runs').select(['opened_by', 'fenced_by']).where((eb) => eb.and(ofRun))),",
        replace: "getRun: prepare(db, run, q.selectFrom('runs').select(['opened_by', 'fenced_by']).where('run_id', '=', run.runId).orderBy('opened_by', 'desc')),",
      },
    ],
    caughtBy: [simulation],
  },
  {
    what: "a retry on a shared file taking over the undelivered rows of the run's other tasks too (their events sent as its own)",
    guarantee: 'G3, G12',
    edits: [
      {
        file: 'src/outbox/file/rows.ts',
        find: "        .where((eb) => eb.and(ofRun))\n        .where('attempt', '<', attempt.attempt)",
        replace: "        .where('run_id', '=', attempt.runId)\n        .where('attempt', '<', attempt.attempt)",
      },
    ],
    caughtBy: [simulation],
  },
  {
    what: "a checkpoint read by run and name, not by task (on a shared file one task resumes from another's progress)",
    guarantee: 'G1, G3',
    edits: [
      {
        file: 'src/outbox/file/checkpoints.ts',
        find: '.where((eb) => eb.and({ run_id: checkpointOf.runId, task: checkpointOf.task, name: checkpointOf.name })),',
        replace: ".where((eb) => eb.and({ run_id: checkpointOf.runId, name: checkpointOf.name })).orderBy('updated_at', 'desc'),",
      },
    ],
    caughtBy: [simulation],
  },
  {
    what: "a dead row sent again (a printed fix) under the attempt that committed it, though a later attempt has opened the file since (the server fences it, and the batch is lost)",
    guarantee: 'G18, G19',
    edits: [{ file: 'src/outbox/file/dead-letters.ts', find: 'const attempt = this.file.runs.currentAttempt(run, row.attempt);', replace: 'const attempt = row.attempt;' }],
    caughtBy: [simulation],
  },
  {
    what: 'PostgreSQL: an instance that never reloads its assets (one registered through another instance, as the fix of a misspelt asset says, is refused as unknown until a restart)',
    guarantee: 'G13, G19',
    postgres: true,
    edits: [{ file: 'src/dedupe/postgres/store.ts', find: '    if (unknown) await this.loadAssets();\n', replace: '' }],
    caughtBy: [simulation],
  },
  {
    what: "the catalog's reads queued by address, not by token (every tenant's dashboard behind one proxy waits in one line: a flooding tenant holds the others out)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/routes/catalog.ts', find: 'return request.principal || `address:${request.ip}`;', replace: 'return `address:${request.ip}`;' }],
    caughtBy: [simulation],
  },
  {
    what: "a reader's share of the catalog's queue counted over every reader's waiting reads (one flooding tenant fills it, and the next tenant is refused)",
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/catalog/gate.ts', find: '    if (mine.length >= CATALOG_QUEUE_PER_READER) return Promise.reject(new CatalogQueueFullError(true));', replace: '    if (this.queued >= CATALOG_QUEUE_PER_READER) return Promise.reject(new CatalogQueueFullError(true));' }],
    caughtBy: [simulation],
  },
  {
    what: 'a catalog read turned away for the queue without Retry-After (a dashboard retries at once, in a loop)',
    guarantee: 'G27',
    edits: [{ file: 'src/dedupe/http-app.ts', find: "      reply.header('retry-after', '1');\n", replace: '' }],
    caughtBy: [simulation],
  },
  {
    what: "the server's copy of what a commit holds sent after the commit's other checkpoints (a relay request that ends between them leaves the run's progress on the server without the held emissions: a retry on a fresh machine never releases them)",
    guarantee: 'G11, G25',
    edits: [
      {
        file: 'src/outbox/commit/commit.ts',
        find: 'const updates = this.checkpoints.has(HELD_CHECKPOINT) ? new Map([[HELD_CHECKPOINT, this.checkpoints.get(HELD_CHECKPOINT)!], ...this.checkpoints]) : this.checkpoints;',
        replace: 'const updates = this.checkpoints;',
      },
    ],
    // Found by the simulation (a campaign's seed with two rows a request); its fixed seeds do not reach it.
    caughtBy: [{ file: lifecycle, name: "wherever the relay cut the commit's rows" }],
  },
  {
    what: 'a run with no end and no request for the stale time shown running in its summary',
    guarantee: 'catalog',
    edits: [{ file: 'src/dedupe/catalog/stream-summaries.ts', find: ": !consumer && row.updated_at < staleBefore ? 'stale' : 'running'", replace: ": 'running'" }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'stale time as stale' }, simulation],
  },
  {
    what: 'a stale run listed among the runs in progress',
    guarantee: 'catalog',
    edits: [{ file: 'src/dedupe/catalog/catalog.ts', find: "eb('s.updated_at', '>=', staleBefore), isConsumer(eb)", replace: "eb('s.updated_at', '>=', ''), isConsumer(eb)" }],
    caughtBy: [{ file: 'test/store/catalog.test.ts', name: 'stale time as stale' }],
  },
  {
    what: "a commit on a full disk throws better-sqlite3's own error, with no code of oncebox's and no fix named",
    guarantee: 'G1',
    edits: [{ file: 'src/outbox/outbox.ts', find: 'throw isTransientSqliteError(error) ? new OutboxWriteError(this.path, error) : error;', replace: 'throw error;' }],
    caughtBy: [{ file: 'test/unit/failpoints.test.ts', name: "throw SQLite's own error" }, { file: 'test/fault/disk-full.test.ts' }, simulation],
  },
  {
    what: '`npx oncebox server` left running, orphaned, after npx was sent SIGTERM',
    guarantee: 'cli',
    edits: [{ file: 'src/cli/arguments.ts', find: "  if (process.env.npm_command === undefined) return;", replace: '  return;' }],
    caughtBy: [{ file: 'test/integration/package.test.ts' }],
  },
  {
    what: 'a command listening for its stop signal once: the same Ctrl-C passed on by npm kills it mid-stop',
    guarantee: 'cli',
    edits: [{ file: 'src/cli/arguments.ts', find: "    process.on('SIGINT', () => stop('SIGINT'));", replace: "    process.once('SIGINT', () => stop('SIGINT'));" }],
    caughtBy: [{ file: 'test/integration/cli.test.ts', name: 'twice at once' }],
  },
];

/** The table of docs/guarantees.md, generated from BREAKS. */
export function breaksTable(): string {
  const rows = BREAKS.map((b) => {
    const tests = b.caughtBy.map((t) => `\`${t.file.replace(/^test\//, '')}\`${t.name ? ` ("${t.name}")` : ''}`).join(', ');
    const bySimulation = b.caughtBy.some((t) => t.file === SIMULATION_TEST) ? ' (caught by the simulation)' : '';
    return `| ${b.what}${bySimulation} | ${b.guarantee} | ${tests} |`;
  });
  return ['| broken code | guarantee | tests that fail on it |', '| --- | --- | --- |', ...rows].join('\n');
}

export const TABLE_START = '<!-- breaks:start (generated by npm run breaks -- --write) -->';
export const TABLE_END = '<!-- breaks:end -->';
