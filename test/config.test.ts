import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig, variables } from '../src/config.ts';

describe('configuration', () => {
  it('has working defaults', () => {
    const c = loadConfig({});
    assert.equal(c.PORT, 8080);
    assert.equal(c.QUEUE_TYPE, 'quorum');
    assert.match(c.DATABASE_URL, /^postgres:\/\//);
  });

  it('names the variable that is wrong, for every wrong one', () => {
    assert.throws(
      () => loadConfig({ PORT: 'eighty', SIM_SPEEDUP: '-1', AMQP_URL: 'http://x' }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.equal(err.issues.length, 3);
        assert.match(err.message, /PORT: expected an integer, got "eighty"/);
        assert.match(err.message, /SIM_SPEEDUP/);
        assert.match(err.message, /AMQP_URL: expected a URL starting with amqp: or amqps:/);
        return true;
      },
    );
  });

  it('stops the process with a non-zero exit and a clear message', () => {
    const r = spawnSync(process.execPath, ['src/main.ts'], {
      env: { ...process.env, PORT: '99999' },
      encoding: 'utf8',
      // A bound for a hang: loading the service's modules took over 20 s on a machine at load 30.
      timeout: 120_000,
    });
    assert.equal(r.status, 78, r.error ? String(r.error) : r.stderr);
    assert.match(r.stderr, /PORT: expected 0\.\.65535, got 99999/);
  });

  it('docs/configuration.md holds the table npm run config-table prints: every variable, default, meaning', () => {
    const doc = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
    const rows = [...doc.matchAll(/^\|\s*`([A-Z0-9_]+)`\s*\|\s*`(.*?)`\s*\|\s*(.*?)\s*\|$/gm)].map((m) => [
      m[1],
      m[2],
      m[3],
    ]);
    const defaults = loadConfig({}) as Record<string, unknown>;
    const expected = Object.entries(variables).map(([name, [, meaning]]) => [
      name,
      String(defaults[name]),
      meaning,
    ]);
    assert.deepEqual(rows, expected, 'regenerate the table with npm run -s config-table');
  });
});
