// The Grafana dashboard and the Prometheus rules refer only to metrics that exist: every metric name
// in every expression is exported by a running faxline (names collected from its live /metrics),
// is a recording rule of deploy/prometheus, is Prometheus's own `up`, or is a RabbitMQ exporter
// metric recorded from a real rabbitmq_prometheus 3.10 node. The all-in-one process's live output
// also passes `promtool check metrics`.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { parse } from 'yaml';
import { exportedNames, parseExposition } from '../src/metrics/exposition.ts';
import { startService } from './support/harness.ts';

const root = new URL('../', import.meta.url).pathname;

const keywords = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
]);

/** Metric names an expression selects: identifiers that are not functions, keywords, labels or strings. */
export function metricNames(expr: string): string[] {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""') // strings
    .replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, ' ') // Grafana variables
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges and subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' '); // label lists
  const out: string[] = [];
  for (const m of s.matchAll(/(?<![\w.:])[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const rest = s.slice(m.index + m[0].length);
    if (/^\s*\(/.test(rest)) continue; // a function or an aggregation
    if (keywords.has(m[0].toLowerCase())) continue;
    out.push(m[0]);
  }
  return out;
}

interface Rule {
  record?: string;
  alert?: string;
  expr: string;
}

function rules(file: string): Rule[] {
  const doc = parse(readFileSync(root + 'deploy/prometheus/' + file, 'utf8')) as {
    groups: { rules: Rule[] }[];
  };
  return doc.groups.flatMap((g) => g.rules);
}

function dashboardExprs(): { panel: string; expr: string }[] {
  const d = JSON.parse(readFileSync(root + 'deploy/grafana/faxline.json', 'utf8')) as {
    panels: { title: string; targets?: { expr: string }[]; panels?: unknown[] }[];
  };
  return d.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
}

describe('metric names in the dashboard and the rules', () => {
  let s: Awaited<ReturnType<typeof startService>>;
  let exported: Set<string>;
  let text: string;
  before(async () => {
    // With SMTP_RELAY set the all-in-one process runs the mail component, whose metrics the mail
    // alerts use (nothing is queued, so nothing is sent to the relay's address).
    s = await startService({ env: { SMTP_RELAY: 'smtp://127.0.0.1:9' } });
    text = await (await fetch(`${s.url}/metrics`)).text();
    exported = exportedNames(parseExposition(text));
  });
  after(async () => {
    await s.dropAll();
  });

  it('the name reader finds metrics and skips functions, labels, keywords and variables', () => {
    assert.deepEqual(
      metricNames(
        'histogram_quantile(0.99, sum by (le, route) (rate(faxline_http_request_duration_seconds_bucket{route=~"/v1/.*"}[$__rate_interval]))) > 1e3 and on (x) up offset 5m',
      ),
      ['faxline_http_request_duration_seconds_bucket', 'up'],
    );
    assert.deepEqual(metricNames('faxline:backlog:max > 100 and deriv(faxline:backlog:max[15m]) > 0'), [
      'faxline:backlog:max',
      'faxline:backlog:max',
    ]);
  });

  it('the all-in-one process exports the whole metric set, and promtool accepts its live output', () => {
    for (const n of [
      'faxline_http_requests_total',
      'faxline_http_request_duration_seconds_bucket',
      'faxline_commands_published_total',
      'faxline_commands_consumed_total',
      'faxline_jobs',
      'faxline_jobs_oldest_seconds',
      'faxline_job_transitions_total',
      'faxline_accept_to_delivered_seconds_bucket',
      'faxline_page_transmission_seconds_bucket',
      'faxline_transmission_outcomes_total',
      'faxline_transmission_attempts_total',
      'faxline_transmission_retries_total',
      'faxline_pages_sent_total',
      'faxline_scheduled_pending',
      'faxline_schedule_lateness_seconds_bucket',
      'faxline_document_preparation_seconds_bucket',
      'faxline_document_failures_total',
      'faxline_backend_lines_in_use',
      'faxline_outbox_pending',
      'faxline_nodejs_eventloop_lag_p99_seconds',
      'faxline_nodejs_heap_size_used_bytes',
      'faxline_nodejs_gc_duration_seconds_bucket',
    ])
      assert.ok(exported.has(n), `${n} is not exported`);
    const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.ifError(r.error);
    assert.equal(r.status, 0, r.stdout + r.stderr);
  });

  it('every dashboard expression and every rule names only metrics that exist', () => {
    const recording = rules('recording.rules.yml');
    const recorded = new Set(recording.map((r) => r.record!));
    const rabbit = exportedNames(
      parseExposition(
        readFileSync(root + 'deploy/prometheus/tests/rabbitmq-detailed-queue.sample.prom', 'utf8'),
      ),
    );
    const known = (n: string) => exported.has(n) || recorded.has(n) || rabbit.has(n) || n === 'up';

    const exprs = [
      ...dashboardExprs().map((e) => ({ where: `dashboard panel "${e.panel}"`, expr: e.expr })),
      ...recording.map((r) => ({ where: `recording rule ${r.record}`, expr: r.expr })),
      ...rules('alerts.rules.yml').map((r) => ({ where: `alert ${r.alert}`, expr: r.expr })),
    ];
    assert.ok(exprs.length > 50, 'expressions were read');
    let checked = 0;
    for (const e of exprs) {
      const names = metricNames(e.expr);
      assert.ok(names.length > 0, `${e.where}: no metric in ${e.expr}`);
      for (const n of names) {
        assert.ok(known(n), `${e.where}: ${n} is not exported by faxline (${e.expr})`);
        checked++;
      }
    }
    assert.ok(checked > 60);
  });

  it('the dashboard is valid JSON with the panels the issue asks for', () => {
    const d = JSON.parse(readFileSync(root + 'deploy/grafana/faxline.json', 'utf8')) as {
      uid: string;
      panels: { type: string; title: string; id: number }[];
    };
    assert.equal(d.uid, 'faxline-overview');
    const rows = d.panels.filter((p) => p.type === 'row').map((p) => p.title);
    assert.deepEqual(rows, [
      'Intake',
      'Backlog',
      'Delivery',
      'Latency',
      'Lines',
      'Scheduling',
      'Processes',
      'Mail',
    ]);
    const ids = d.panels.map((p) => p.id);
    assert.equal(new Set(ids).size, ids.length, 'panel ids are unique');
  });
});
