// Metrics from real processes: the API and each worker kind run as separate OS processes (their
// own entry points) against the real PostgreSQL and RabbitMQ, with the simulated line at zero line
// time. Faxes go in through the HTTP API, one per simulated outcome, plus a scheduled fax and a
// cancelled one; then every process's /metrics is scraped, checked by `promtool check metrics`, and
// the counters and histograms must have moved exactly as the traffic says. Log lines about each job
// must carry its job id and request id.
//
// To cover a new simulated outcome (a test number of the simulated line), add a row to `cases`.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { has, parseExposition, sumOf, type Exposition } from '../src/metrics/exposition.ts';
import { call, seedAccount, tokenFor } from './support/client.ts';
import { AMQP_URL, createDatabase, deleteTopology, eventually, queuePrefix } from './support/harness.ts';
import type { TestService } from './support/harness.ts';
import { makePdfBase64 } from './support/pdf.ts';
import { startProcess, type Proc } from './support/process.ts';

interface Case {
  name: string;
  faxNumber: string;
  pages: number;
  /** Send bytes that start like a PDF but are not one. */
  brokenPdf?: boolean;
  /** Final state, and what the worker's metrics must say about it. */
  expect: { state: string; outcome?: string; documentFailure?: string };
}

const cases: Case[] = [
  {
    name: 'delivered, one page',
    faxNumber: '+15557770001',
    pages: 1,
    expect: { state: 'delivered', outcome: 'delivered' },
  },
  {
    name: 'delivered, three pages',
    faxNumber: '+15557770002',
    pages: 3,
    expect: { state: 'delivered', outcome: 'delivered' },
  },
  {
    name: 'document refused: not a readable PDF',
    faxNumber: '+15557770003',
    pages: 1,
    brokenPdf: true,
    expect: { state: 'failed', documentFailure: 'pdf_broken' },
  },
];

const entries = {
  api: 'src/api-main.ts',
  send: 'workers/send.ts',
  cancel: 'workers/cancel.ts',
  scheduler: 'workers/scheduler.ts',
} as const;
type Kind = keyof typeof entries;

async function scrape(url: string): Promise<{ text: string; e: Exposition }> {
  const res = await fetch(`${url}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  return { text, e: parseExposition(text) };
}

const terminal = new Set(['delivered', 'failed', 'cancelled', 'rejected', 'unknown']);

describe('metrics of running processes', () => {
  let db: Awaited<ReturnType<typeof createDatabase>>;
  const prefix = queuePrefix('m');
  const procs = {} as Record<Kind, Proc>;
  const urls = {} as Record<Kind, string>;

  before(async () => {
    db = await createDatabase();
    const env = {
      DATABASE_URL: db.url,
      AMQP_URL,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      METRICS_PORT: '0',
      HOST: '127.0.0.1',
      SIM_SPEEDUP: '0',
      LOG_LEVEL: 'info',
      OUTBOX_SWEEP_SECONDS: '1',
      METRICS_DB_SECONDS: '1',
    };
    // The API first (it applies the migrations), then every worker kind at once.
    procs.api = startProcess(entries.api, env);
    const started = async (k: Kind) => {
      const line = await procs[k].waitFor(/"msg":"faxline started"/);
      urls[k] = (JSON.parse(line) as { address: string }).address;
    };
    await started('api');
    for (const k of ['send', 'cancel', 'scheduler'] as const) procs[k] = startProcess(entries[k], env);
    await Promise.all((['send', 'cancel', 'scheduler'] as const).map(started));
  });

  after(async () => {
    for (const p of Object.values(procs)) if (p.child.exitCode === null) p.child.kill('SIGTERM');
    await Promise.all(Object.values(procs).map((p) => p.exited));
    await deleteTopology(prefix).catch(() => undefined);
    await db.drop();
  });

  it('every process serves /healthz, /readyz and /metrics that promtool accepts', async () => {
    for (const k of Object.keys(entries) as Kind[]) {
      assert.equal((await fetch(`${urls[k]}/healthz`)).status, 200, k);
      const ready = await eventually(async () => {
        const r = await fetch(`${urls[k]}/readyz`);
        return r.status === 200 ? ((await r.json()) as { data: Record<string, boolean> }) : null;
      });
      for (const check of ['postgres', 'migrations', 'rabbitmq', 'consumers'])
        assert.equal(ready.data[check], true, `${k} /readyz ${check}`);
      const { text, e } = await scrape(urls[k]);
      const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
      assert.ifError(r.error);
      assert.equal(r.status, 0, `${k}: ${r.stdout}${r.stderr}`);
      // One process label per process kind, on every series.
      assert.ok(e.samples.length > 50);
      assert.ok(
        e.samples.every((s) => s.labels.process === k),
        k,
      );
      // Only the API and the scheduler read the service-wide gauges from PostgreSQL.
      assert.equal(has(e, 'faxline_jobs'), k === 'api' || k === 'scheduler', k);
    }
  });

  it('counters and histograms move as the traffic says', async () => {
    const svc = { cfg: { DATABASE_URL: db.url } } as TestService;
    const seed = await seedAccount(svc);
    const token = await tokenFor(urls.api, seed.api_key);
    const broken = Buffer.from('%PDF-1.7\nthis is not really a pdf').toString('base64');

    const send = async (body: Record<string, unknown>, requestId: string) => {
      const r = await call(urls.api, 'POST', '/v1/faxes/send', {
        token,
        body,
        headers: { 'x-request-id': requestId },
      });
      assert.equal(r.http, 200, JSON.stringify(r.body));
      return r.body.data.job_id as string;
    };
    const jobs: { id: string; requestId: string; c: Case }[] = [];
    for (const [i, c] of cases.entries()) {
      const requestId = `req-metrics-${i}`;
      const file_data = c.brokenPdf ? broken : await makePdfBase64(c.pages);
      const id = await send(
        { fax_number: c.faxNumber, fax_data: [{ file_name: `${i}.pdf`, file_data }] },
        requestId,
      );
      jobs.push({ id, requestId, c });
    }
    // A fax scheduled 1.5 s ahead (fired by the scheduler process), and one cancelled before its time.
    const onePage = await makePdfBase64(1);
    const scheduledCase: Case = {
      name: 'scheduled, then delivered',
      faxNumber: '+15557770010',
      pages: 1,
      expect: { state: 'delivered', outcome: 'delivered' },
    };
    const scheduledId = await send(
      {
        fax_number: scheduledCase.faxNumber,
        fax_data: [{ file_name: 's.pdf', file_data: onePage }],
        scheduled_date: new Date(Date.now() + 1500).toISOString(),
      },
      'req-metrics-scheduled',
    );
    jobs.push({ id: scheduledId, requestId: 'req-metrics-scheduled', c: scheduledCase });
    const laterId = await send(
      {
        fax_number: '+15557770011',
        fax_data: [{ file_name: 'l.pdf', file_data: onePage }],
        scheduled_date: new Date(Date.now() + 3_600_000).toISOString(),
      },
      'req-metrics-cancel',
    );
    const cancelled = await call(urls.api, 'POST', '/v1/faxes/cancel-schedule', {
      token,
      body: { job_id: laterId },
      headers: { 'x-request-id': 'req-metrics-cancel' },
    });
    assert.equal(cancelled.http, 200, JSON.stringify(cancelled.body));

    for (const j of jobs) {
      const state = await eventually(async () => {
        const r = await call(urls.api, 'GET', `/v1/faxes/${j.id}`, { token });
        const st = r.body.data?.state as string | undefined;
        return st && terminal.has(st) ? st : null;
      }, 20_000);
      assert.equal(state, j.c.expect.state, j.c.name);
    }

    // What the worker's metrics must show, derived from the cases.
    const all = jobs.map((j) => j.c);
    const prepared = all.filter((c) => !c.expect.documentFailure);
    const delivered = all.filter((c) => c.expect.outcome === 'delivered');
    const outcomes = new Map<string, number>();
    for (const c of prepared)
      if (c.expect.outcome) outcomes.set(c.expect.outcome, (outcomes.get(c.expect.outcome) ?? 0) + 1);
    const docFailures = new Map<string, number>();
    for (const c of all)
      if (c.expect.documentFailure)
        docFailures.set(c.expect.documentFailure, (docFailures.get(c.expect.documentFailure) ?? 0) + 1);
    const pagesDelivered = delivered.reduce((n, c) => n + c.pages, 0);
    const failed = all.filter((c) => c.expect.state === 'failed').length;
    const sendCommands = all.length; // every job but the cancelled one reaches the send queue once

    // Increments happen right after each state is committed: wait for the last of them.
    const w = await eventually(async () => {
      const { e } = await scrape(urls.send);
      return sumOf(e, 'faxline_commands_consumed_total', { queue: 'send', outcome: 'ack' }) ===
        sendCommands && sumOf(e, 'faxline_backend_lines_in_use') === 0
        ? e
        : null;
    });
    const b = { backend: 'simulated' };
    assert.equal(sumOf(w, 'faxline_job_transitions_total', { to: 'preparing' }), sendCommands);
    assert.equal(sumOf(w, 'faxline_job_transitions_total', { to: 'dialling' }), prepared.length);
    const connected = sumOf(w, 'faxline_job_transitions_total', { to: 'sending' });
    assert.ok(connected >= delivered.length && connected <= prepared.length, `sending ${connected}`);
    assert.equal(sumOf(w, 'faxline_job_transitions_total', { to: 'delivered' }), delivered.length);
    assert.equal(sumOf(w, 'faxline_job_transitions_total', { to: 'failed' }), failed);
    assert.equal(sumOf(w, 'faxline_transmission_attempts_total', b), prepared.length);
    assert.equal(sumOf(w, 'faxline_transmission_retries_total', b), 0);
    assert.equal(sumOf(w, 'faxline_transmission_outcomes_total', b), prepared.length);
    for (const [outcome, n] of outcomes)
      assert.equal(sumOf(w, 'faxline_transmission_outcomes_total', { ...b, outcome }), n, outcome);
    for (const [reason, n] of docFailures)
      assert.equal(sumOf(w, 'faxline_document_failures_total', { reason }), n, reason);
    assert.equal(sumOf(w, 'faxline_pages_sent_total', b), pagesDelivered);
    assert.equal(sumOf(w, 'faxline_page_transmission_seconds_count', b), pagesDelivered);
    assert.equal(sumOf(w, 'faxline_page_transmission_seconds_bucket', { ...b, le: '+Inf' }), pagesDelivered);
    assert.equal(sumOf(w, 'faxline_accept_to_delivered_seconds_count'), delivered.length);
    assert.ok(sumOf(w, 'faxline_accept_to_delivered_seconds_sum') > 0);
    // The scheduled fax waited ~1.5 s before it was accepted: accept→delivered counts from its creation.
    assert.ok(sumOf(w, 'faxline_accept_to_delivered_seconds_sum') >= 1);
    assert.equal(sumOf(w, 'faxline_document_preparation_seconds_count'), prepared.length);
    assert.equal(sumOf(w, 'faxline_commands_consumed_total', { outcome: 'retry' }), 0);
    assert.equal(sumOf(w, 'faxline_commands_consumed_total', { outcome: 'dead_letter' }), 0);
    const attached = sumOf(w, 'faxline_amqp_consumers', { status: 'attached' });
    assert.ok(attached >= 2, 'send and forward consumers attached');
    assert.equal(attached, sumOf(w, 'faxline_amqp_consumers', { status: 'registered' }));
    assert.ok(has(w, 'faxline_nodejs_eventloop_lag_p99_seconds'));
    assert.ok(has(w, 'faxline_process_resident_memory_bytes'));

    // The API: intake requests, their latency, the commands it published, the cancel it decided.
    const { e: a } = await scrape(urls.api);
    const sendRoute = { route: '/v1/faxes/send', method: 'POST' };
    assert.equal(sumOf(a, 'faxline_http_requests_total', { ...sendRoute, status: '200' }), all.length + 1);
    assert.equal(sumOf(a, 'faxline_http_request_duration_seconds_count', sendRoute), all.length + 1);
    assert.equal(
      sumOf(a, 'faxline_http_requests_total', { route: '/v1/faxes/cancel-schedule', status: '200' }),
      1,
    );
    assert.equal(
      sumOf(a, 'faxline_commands_published_total', {
        exchange: 'commands',
        type: 'send',
        outcome: 'confirmed',
      }),
      cases.length, // the scheduled fax's command is published by the scheduler, at its time
    );
    assert.equal(
      sumOf(a, 'faxline_commands_published_total', {
        exchange: 'commands',
        type: 'cancel',
        outcome: 'confirmed',
      }),
      1,
    );
    assert.equal(sumOf(a, 'faxline_job_transitions_total', { to: 'cancelled' }), 1);

    // The scheduler: one fax fired, with its lateness; its send command published.
    const { e: s } = await scrape(urls.scheduler);
    assert.equal(sumOf(s, 'faxline_schedule_lateness_seconds_count'), 1);
    const late = sumOf(s, 'faxline_schedule_lateness_seconds_sum');
    assert.ok(late >= 0 && late < 5, `lateness ${late} s`);
    assert.equal(sumOf(s, 'faxline_job_transitions_total', { to: 'accepted' }), 1);
    assert.equal(
      sumOf(s, 'faxline_commands_published_total', {
        exchange: 'commands',
        type: 'send',
        outcome: 'confirmed',
      }),
      1,
    );

    // The cancel worker handled the cancel command.
    const { e: c } = await scrape(urls.cancel);
    assert.equal(sumOf(c, 'faxline_commands_consumed_total', { queue: 'cancel', outcome: 'ack' }), 1);

    // Service-wide gauges: nothing left open (read at most once a second here).
    const g = await eventually(async () => {
      const { e } = await scrape(urls.api);
      return sumOf(e, 'faxline_jobs') === 0 ? e : null;
    }, 12_000);
    assert.equal(sumOf(g, 'faxline_jobs', { state: 'accepted' }), 0);
    assert.equal(sumOf(g, 'faxline_scheduled_pending'), 0);
    assert.equal(sumOf(g, 'faxline_outbox_pending'), 0);
    assert.equal(sumOf(g, 'faxline_collector_errors_total'), 0);

    // Logs correlate: every line of any process that mentions a job carries its request id.
    for (const j of [...jobs, { id: laterId, requestId: 'req-metrics-cancel', c: cases[0]! }]) {
      const lines = Object.values(procs).flatMap((p) => p.lines.filter((l) => l.includes(j.id)));
      assert.ok(lines.length > 0, `no log line about ${j.id}`);
      for (const l of lines)
        assert.ok(l.includes(j.requestId), `line about ${j.id} without its request id: ${l}`);
    }
  });
});
