// deploy/prometheus checked by Prometheus's own tool: the scrape configuration and the rules are
// valid, the alert unit tests (each alert firing on a synthetic problem, quiet on a healthy series)
// pass, and every alert carries the annotations and the runbook section an on-call SRE needs.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse } from 'yaml';

const dir = new URL('../deploy/prometheus/', import.meta.url).pathname;

function promtool(...args: string[]): string {
  const r = spawnSync('promtool', args, { cwd: dir, encoding: 'utf8', timeout: 60_000 });
  if (r.error)
    throw new Error(`promtool could not run (scripts/system-packages.sh installs it): ${r.error.message}`);
  assert.equal(r.status, 0, `promtool ${args.join(' ')}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout + r.stderr;
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

const alerts = (
  parse(readFileSync(dir + 'alerts.rules.yml', 'utf8')) as { groups: { rules: Rule[] }[] }
).groups
  .flatMap((g) => g.rules)
  .filter((r) => r.alert);

describe('deploy/prometheus', () => {
  it('promtool accepts the scrape configuration and the rule files', () => {
    assert.match(promtool('check', 'config', 'prometheus.yml'), /SUCCESS/);
    const out = promtool('check', 'rules', 'recording.rules.yml', 'alerts.rules.yml');
    assert.match(out, /SUCCESS: \d+ rules found/);
  });

  it('promtool rule unit tests pass: each alert fires on a problem and stays quiet when healthy', () => {
    assert.match(promtool('test', 'rules', 'tests/alerts.test.yml'), /SUCCESS/);
  });

  it('the unit tests cover every alert, firing and quiet', () => {
    const tests = (
      parse(readFileSync(dir + 'tests/alerts.test.yml', 'utf8')) as {
        tests: { alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[];
      }
    ).tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const a of alerts) {
      const mine = tests.filter((t) => t.alertname === a.alert);
      assert.ok(
        mine.some((t) => t.exp_alerts.length > 0),
        `${a.alert}: no test shows it firing`,
      );
      assert.ok(
        mine.some((t) => t.exp_alerts.length === 0),
        `${a.alert}: no test shows it quiet`,
      );
    }
  });

  it('covers what the issue asks to alert on', () => {
    const names = alerts.map((a) => a.alert);
    for (const n of [
      'FaxlineBacklogGrowing',
      'FaxlineJobsStuck',
      'FaxlineFailureRatioHigh',
      'FaxlineScheduledFiringLate',
      'FaxlineCommandQueueNoConsumer',
      'FaxlineDeadLetterQueueNotEmpty',
      'FaxlineApiErrorRatioHigh',
      'FaxlineApiLatencyHigh',
      'FaxlineProcessDown',
    ])
      assert.ok(names.includes(n), n);
  });

  it('every alert has a severity, a summary, a description and a runbook section', () => {
    const runbook = readFileSync(dir + 'RUNBOOK.md', 'utf8');
    const sections = new Set([...runbook.matchAll(/^## (\S+)$/gm)].map((m) => m[1]!.toLowerCase()));
    for (const a of alerts) {
      assert.match(a.labels?.severity ?? '', /^(warning|critical)$/, `${a.alert} severity`);
      assert.ok(a.annotations?.summary, `${a.alert} summary`);
      assert.ok(a.annotations?.description, `${a.alert} description`);
      const anchor = a.alert!.toLowerCase();
      assert.equal(a.annotations?.runbook_url, `RUNBOOK.md#${anchor}`, `${a.alert} runbook_url`);
      assert.ok(sections.has(anchor), `RUNBOOK.md has no section "## ${a.alert}"`);
    }
  });
});
