// Honest skips: a test that cannot run here is skipped with its reason and counted in the summary;
// with FAXLINE_NO_SKIPS=1 (CI) the would-be skip fails the run instead, naming the reason.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

const dir = mkdtempSync(join(tmpdir(), 'faxline-skips-'));
const file = join(dir, 'needs.test.ts');
writeFileSync(
  file,
  `import { it } from 'node:test';
import { skipUnless } from ${JSON.stringify(new URL('./support/skips.ts', import.meta.url).href)};
it('needs a missing tool', skipUnless('the frobnicator is not installed'), () => {
  throw new Error('ran although the tool is missing');
});
it('needs nothing', skipUnless(false), () => {});
`,
);

function run(env: Record<string, string>) {
  const clean = { ...process.env };
  delete clean.FAXLINE_NO_SKIPS;
  delete clean.FAXLINE_REQUIRE_SPANDSP;
  delete clean.NODE_TEST_CONTEXT;
  delete clean.NODE_V8_COVERAGE;
  const r = spawnSync(process.execPath, ['--test', '--test-reporter=spec', file], {
    env: { ...clean, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('skips', () => {
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('are counted in the summary with their reason', () => {
    const r = run({});
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /ℹ skipped 1\b/);
    assert.match(r.out, /ℹ pass 1\b/);
    assert.match(r.out, /needs a missing tool .*# the frobnicator is not installed/);
  });

  it('fail the run, naming the reason, when FAXLINE_NO_SKIPS=1', () => {
    const r = run({ FAXLINE_NO_SKIPS: '1' });
    assert.notEqual(r.code, 0, r.out);
    assert.match(r.out, /FAXLINE_NO_SKIPS=1 forbids this skip: the frobnicator is not installed/);
    assert.doesNotMatch(r.out, /ran although the tool is missing/);
  });

  it('FAXLINE_REQUIRE_SPANDSP=1 forbids only skips for want of SpanDSP', () => {
    const r = run({ FAXLINE_REQUIRE_SPANDSP: '1' });
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /ℹ skipped 1\b/);
  });
});
