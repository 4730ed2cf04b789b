/**
 * `oncebox/testing`: property-test your own job's promise. Run it through random failure scenarios
 * (a kill at every point the job reaches, a commit that throws, retries on the same and on a fresh machine, zombies, network
 * faults) against a real test server, and check that what it published is what a clean run publishes,
 * each event once and in order, with the same data. See docs/testing.md.
 * @packageDocumentation
 * @module oncebox/testing
 */
export { checkJob, JobCheckError, type CampaignResult, type CheckJobOptions } from './check-job.js';
export { runScenario, assertClean, JobNotCheckableError, type ScenarioOutcome } from './run-scenario.js';
export type { JobUnderTest } from './job.js';
export { scenarioArbitrary, singleKills, describeScenario, attemptsOf, PRODUCER_POINTS, CONSUMER_POINTS, type Scenario, type ScenarioOptions, type AttemptPlan, type AttemptEnd, type CommitError, type KillPoint } from './scenario.js';
export { checkHistory, describeAnomalies, type Anomaly, type AnomalyKind, type Publication, type RunHistory } from './history.js';
export type { AttemptRecord } from './attempts.js';
export { startTestServer, type TestServer, type TestServerOptions } from './test-server.js';
export { startFaultProxy, type Fault, type FaultProxy, type FaultProxyOptions } from './fault-proxy.js';
export { snapshotDataStore } from './data-store.js';
