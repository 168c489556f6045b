// The layer rules of .dependency-cruiser.mjs (docs/source-layout.md, "Layers"): the real tree has no
// violation, and a small tree with one deliberate violation of each rule gets exactly those, named.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';

const root = fileURLToPath(new URL('..', import.meta.url));
const config = join(root, '.dependency-cruiser.mjs');
const cli = join(root, 'node_modules/dependency-cruiser/bin/dependency-cruiser.mjs');

interface Violation {
  rule: string;
  from: string;
  to: string;
}

/** Runs depcruise (the CLI `npm run deps:layers` runs) in `cwd` on `paths`; its violations. */
function cruise(cwd: string, paths: string[]): Violation[] {
  const env = { ...process.env };
  delete env.NODE_V8_COVERAGE;
  delete env.NODE_TEST_CONTEXT;
  const r = spawnSync(process.execPath, [cli, ...paths, '--config', config, '--output-type', 'json'], {
    cwd,
    env,
    encoding: 'utf8',
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  assert.ok(r.stdout, `depcruise printed nothing: ${r.stderr}`);
  const out = JSON.parse(r.stdout) as {
    summary: { violations: { rule: { name: string }; from: string; to: string }[] };
  };
  return out.summary.violations.map((v) => ({ rule: v.rule.name, from: v.from, to: v.to }));
}

const key = (v: Violation) => `${v.rule}: ${v.from} → ${v.to}`;

describe('layers', () => {
  it('the source tree has no upward import, no cycle and nothing unresolvable', () => {
    assert.deepEqual(cruise(root, ['src', 'workers']).map(key), []);
  });

  describe('a tree with one violation of each rule', () => {
    const dir = mkdtempSync(join(tmpdir(), 'faxline-layers-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const files: Record<string, string> = {
      'tsconfig.json': JSON.stringify({
        compilerOptions: {
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          allowImportingTsExtensions: true,
        },
      }),
      // Allowed: each of these imports points down or stays in its layer.
      'src/domain/states.ts': `export const states = ['accepted'];\n`,
      'src/db/pool.ts': `import { states } from '../domain/states.ts';\nexport const pool = states;\n`,
      'src/jobs/repo.ts': `import { pool } from '../db/pool.ts';\nexport const repo = pool;\n`,
      'src/api/server.ts': `import { repo } from '../jobs/repo.ts';\nexport const server = repo;\n`,
      'src/app.ts': `import { server } from './api/server.ts';\nexport const app = server;\n`,
      // Upward: the domain imports the HTTP adapter.
      'src/domain/upward.ts': `import { server } from '../api/server.ts';\nexport const u = server;\n`,
      // Upward, type only: a driver imports a type of the wiring (what metrics/ports.ts did).
      'src/metrics/ports.ts': `import type { app } from '../app.ts';\nexport type P = typeof app;\n`,
      // A cycle inside one layer (reported once, from the first module of the cycle).
      'src/intake/a.ts': `import { b } from './b.ts';\nexport const a = () => b;\n`,
      'src/intake/b.ts': `import { a } from './a.ts';\nexport const b = () => a;\n`,
      // One adapter importing another.
      'src/amqp-intake/intake.ts': `import { server } from '../api/server.ts';\nexport const i = server;\n`,
      // I/O in the domain.
      'src/domain/io.ts': `import { readFileSync } from 'node:fs';\nexport const io = readFileSync;\n`,
      // A folder no layer names, an import that resolves to nothing, src importing a test.
      'src/jobs/elsewhere.ts': `import { x } from '../newfolder/x.ts';\nexport const e = x;\n`,
      'src/newfolder/x.ts': `export const x = 1;\n`,
      // A module in no layer that nothing imports, importing the HTTP adapter.
      'src/tools/entry.ts': `import { server } from '../api/server.ts';\nexport const t = server;\n`,
      // The client importing the service's domain instead of speaking HTTP.
      'src/client/index.ts': `import { states } from '../domain/states.ts';\nexport const c = states;\n`,
      'src/jobs/missing.ts': `import { m } from './not-there.ts';\nexport const n = m;\n`,
      'src/jobs/helper.ts': `import { t } from '../../test/support/t.ts';\nexport const h = t;\n`,
      'test/support/t.ts': `export const t = 1;\n`,
    };
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    }

    it('gets exactly the violations planted, each under its rule', () => {
      const got = cruise(dir, ['src']).map(key).sort();
      const expected: Violation[] = [
        { rule: 'no-upward-from-domain', from: 'src/domain/upward.ts', to: 'src/api/server.ts' },
        { rule: 'domain-is-pure', from: 'src/domain/upward.ts', to: 'src/api/server.ts' },
        { rule: 'no-upward-from-drivers', from: 'src/metrics/ports.ts', to: 'src/app.ts' },
        { rule: 'no-circular', from: 'src/intake/a.ts', to: 'src/intake/b.ts' },
        { rule: 'adapters-are-independent', from: 'src/amqp-intake/intake.ts', to: 'src/api/server.ts' },
        { rule: 'domain-is-pure', from: 'src/domain/io.ts', to: 'fs' },
        { rule: 'in-a-layer', from: 'src/jobs/elsewhere.ts', to: 'src/newfolder/x.ts' },
        { rule: 'importer-in-a-layer', from: 'src/tools/entry.ts', to: 'src/api/server.ts' },
        { rule: 'not-to-unresolvable', from: 'src/jobs/missing.ts', to: './not-there.ts' },
        { rule: 'client-stands-alone', from: 'src/client/index.ts', to: 'src/domain/states.ts' },
        { rule: 'not-to-tests-or-tools', from: 'src/jobs/helper.ts', to: 'test/support/t.ts' },
      ];
      assert.deepEqual(got, expected.map(key).sort());
    });
  });
});
