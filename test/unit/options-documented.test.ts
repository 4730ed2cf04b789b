import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { REPO } from '../support/child.js';

/**
 * Every option is documented once: on its public interface, which is what the API reference and an
 * editor show. The zod schema that validates it carries no docs of its own (two copies had drifted), and
 * `Same<Interface, z.input<typeof schema>>` in each file ties their shapes at compile time.
 */
const OPTIONS = [
  { file: 'src/outbox/options.ts', options: 'OutboxOptions', schema: 'outboxOptionsSchema' },
  { file: 'src/outbox/options.ts', options: 'RunOptions', schema: 'runContextSchema' },
  { file: 'src/consumer/options.ts', options: 'ConsumerOptions', schema: 'consumerOptionsSchema' },
  { file: 'src/dedupe/server.ts', options: 'ServerOptions', schema: 'serverOptionsSchema' },
  { file: 'src/airflow/forwarder.ts', options: 'AirflowForwarderOptions', schema: 'forwarderOptionsSchema' },
  { file: 'src/bullmq/options.ts', options: 'OnceboxWorkerOptions', schema: 'onceboxWorkerOptionsSchema' },
];

function parse(file: string): ts.SourceFile {
  return ts.createSourceFile(file, readFileSync(join(REPO, file), 'utf8'), ts.ScriptTarget.Latest, true);
}

const docsOf = (node: ts.Node) => ts.getJSDocCommentsAndTags(node).filter(ts.isJSDoc);

describe.each(OPTIONS)('$options', ({ file, options, schema }) => {
  const source = parse(file);
  const statements = source.statements;

  it('documents each of its options on the interface', () => {
    const declared = statements.find((node): node is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(node) && node.name.text === options);
    expect(declared, `${file} declares interface ${options}`).toBeDefined();
    const undocumented = declared!.members.filter((member) => docsOf(member).length === 0).map((member) => member.name?.getText(source));
    expect(undocumented).toEqual([]);
  });

  it('keeps no second copy of those docs on its zod schema', () => {
    const declaration = statements
      .filter(ts.isVariableStatement)
      .flatMap((statement) => statement.declarationList.declarations)
      .find((node) => node.name.getText(source) === schema);
    expect(declaration, `${file} declares ${schema}`).toBeDefined();
    const documented: string[] = [];
    const visit = (node: ts.Node) => {
      if (ts.isPropertyAssignment(node) && docsOf(node).length > 0) documented.push(node.name.getText(source));
      ts.forEachChild(node, visit);
    };
    visit(declaration!);
    expect(documented).toEqual([]);
  });
});
