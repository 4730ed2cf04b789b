import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { REPO } from '../support/child.js';

/**
 * The recipes of docs/production.md (deploy/): nothing here can run a container or systemd, so the
 * files are held to the code they name: what the Dockerfile copies exists and what it runs is the
 * package's binary, every flag the unit passes is one `oncebox server` takes, and every metric an alert
 * reads is one oncebox exports.
 */
const read = (path: string) => readFileSync(join(REPO, path), 'utf8');
const CLI = join(REPO, 'src/cli/main.ts');

describe('the deploy recipes', () => {
  it('the Dockerfile copies what exists and runs the package’s binary', () => {
    const dockerfile = read('deploy/Dockerfile');
    const sources = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((match) => match[1]!.split(/\s+/));
    expect(sources.length).toBeGreaterThan(3);
    for (const source of sources) expect(existsSync(join(REPO, source)), source).toBe(true);
    const { bin } = JSON.parse(read('package.json')) as { bin: Record<string, string> };
    expect(dockerfile).toContain(`ENTRYPOINT ["node", "${bin.oncebox!.replace(/^\.\//, '')}"]`);
    expect(read('tsconfig.build.json')).toContain('"outDir"');
  });

  it('the systemd unit passes only flags `oncebox server` takes', () => {
    const unit = read('deploy/oncebox.service').replace(/\\\n\s*/g, ' ');
    const command = /^ExecStart=\/usr\/bin\/env oncebox server (.+)$/m.exec(unit)![1]!;
    const flags = [...command.matchAll(/--[a-z-]+/g)].map((match) => match[0]);
    const help = execFileSync(process.execPath, ['--import', 'tsx', CLI, 'server', '--help'], { cwd: REPO, encoding: 'utf8' });
    expect(flags.length).toBeGreaterThan(3);
    for (const flag of flags) expect(help, flag).toContain(`${flag} `);
  });

  it('every alert reads metrics oncebox exports', () => {
    const rules = parse(read('deploy/alerts.yml')) as { groups: { rules: { alert: string; expr: string }[] }[] };
    const exported = read('src/dedupe/metrics.ts') + read('src/outbox/metrics.ts');
    const alerts = rules.groups.flatMap((group) => group.rules);
    expect(alerts.length).toBeGreaterThan(5);
    for (const { alert, expr } of alerts) {
      for (const metric of expr.match(/oncebox_[a-z_]+/g) ?? []) expect(exported, `${alert}: ${metric}`).toContain(`'${metric}'`);
    }
  });
});
