import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { REPO } from '../support/child.js';

/** The public surface is what package.json `exports` names, built to dist/, and nothing deeper. */
describe('package exports', () => {
  it('expose the producer, the consumer, the Airflow forwarder, the BullMQ adapter, the server, the protocol and the testing kit, each on its own subpath, and refuse deep imports', () => {
    execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: REPO });
    const script = `
      const producer = await import('oncebox');
      const server = await import('oncebox/server');
      const consumer = await import('oncebox/consumer');
      const airflow = await import('oncebox/airflow');
      const bullmq = await import('oncebox/bullmq');
      const protocol = await import('oncebox/protocol');
      const testing = await import('oncebox/testing');
      let deep = 'imported';
      try { await import('oncebox/dist/outbox/relay/relay.js'); } catch (error) { deep = error.code; }
      console.log(JSON.stringify({
        producer: ['openOutbox', 'FencedError', 'KeyConflictError', 'RejectedError', 'deriveKey'].filter((name) => typeof producer[name] === 'function'),
        producerLeaksServer: 'createServer' in producer,
        consumer: ['openConsumer', 'Consumer', 'ConsumeTransaction', 'FencedError'].filter((name) => typeof consumer[name] === 'function'),
        consumerLeaksServer: 'createServer' in consumer,
        airflow: ['openAirflowForwarder', 'AirflowForwarder', 'readAssetMap', 'AirflowError', 'FencedError'].filter((name) => typeof airflow[name] === 'function'),
        bullmq: ['onceboxWorker', 'FencedError'].filter((name) => typeof bullmq[name] === 'function'),
        server: ['createServer', 'SqliteDedupeStore', 'PostgresDedupeStore', 'openDedupeStore', 'TokenRegistry'].filter((name) => typeof server[name] === 'function'),
        protocol: ['canonicalJson', 'payloadFingerprint'].filter((name) => typeof protocol[name] === 'function'),
        testing: ['checkJob', 'runScenario', 'scenarioArbitrary', 'checkHistory', 'startTestServer', 'startFaultProxy', 'JobCheckError'].filter((name) => typeof testing[name] === 'function'),
        producerLeaksTesting: 'checkJob' in producer,
        deep,
      }));`;
    const output = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO, encoding: 'utf8' });
    expect(JSON.parse(output)).toEqual({
      producer: ['openOutbox', 'FencedError', 'KeyConflictError', 'RejectedError', 'deriveKey'],
      producerLeaksServer: false,
      consumer: ['openConsumer', 'Consumer', 'ConsumeTransaction', 'FencedError'],
      consumerLeaksServer: false,
      airflow: ['openAirflowForwarder', 'AirflowForwarder', 'readAssetMap', 'AirflowError', 'FencedError'],
      bullmq: ['onceboxWorker', 'FencedError'],
      server: ['createServer', 'SqliteDedupeStore', 'PostgresDedupeStore', 'openDedupeStore', 'TokenRegistry'],
      protocol: ['canonicalJson', 'payloadFingerprint'],
      testing: ['checkJob', 'runScenario', 'scenarioArbitrary', 'checkHistory', 'startTestServer', 'startFaultProxy', 'JobCheckError'],
      producerLeaksTesting: false,
      deep: 'ERR_PACKAGE_PATH_NOT_EXPORTED',
    });
    expect(execFileSync(process.execPath, ['dist/cli/main.js', 'help'], { cwd: REPO, encoding: 'utf8' })).toMatch(/^Usage: oncebox \[options\] \[command\]\n[\s\S]*\n {2}server \[options\] /);
  });
});

describe('module boundaries', () => {
  it('keep the producer, the consumer and the server apart: all import the protocol, the consumer the producer, and none the server', async () => {
    const { readdirSync, readFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const importsOf = (dir: string): string[] =>
      readdirSync(join(REPO, 'src', dir), { recursive: true, encoding: 'utf8' })
        .filter((file) => file.endsWith('.ts'))
        .flatMap((file) => [...readFileSync(join(REPO, 'src', dir, file), 'utf8').matchAll(/from '([^']+)'/g)].map((m) => `${dir}/${file}: ${m[1]}`));
    const producer = [...importsOf('outbox'), ...importsOf('checkpoint')];
    const server = importsOf('dedupe');
    expect(producer.filter((line) => line.includes('/dedupe/'))).toEqual([]);
    expect(producer.filter((line) => line.includes('/consumer/'))).toEqual([]);
    expect(importsOf('consumer').filter((line) => line.includes('/dedupe/'))).toEqual([]);
    // The forwarder is a consumer: it may use the consumer and the producer, never the server.
    expect(importsOf('airflow').filter((line) => line.includes('/dedupe/'))).toEqual([]);
    expect(server.filter((line) => /\/(outbox|checkpoint)\//.test(line))).toEqual([]);
    expect(importsOf('protocol').filter((line) => /\/(outbox|checkpoint|dedupe)\//.test(line))).toEqual([]);
  });
});
