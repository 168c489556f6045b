// Benchmark (not a test): scheduled faxes with none pending, then with 1,000,000 pending, in one run
// against the real PostgreSQL and RabbitMQ. Measures, through the real HTTP API:
//   - send latency of a scheduled fax (far tier: due in 1-80 days; near tier: due within the window),
//   - cancel latency,
//   - lateness of faxes falling due (near-tier, promoted far-tier, and a burst due at one instant),
//     from the database's own record: the scheduled → accepted transition time minus scheduled_at.
// The million is bulk-inserted with SQL into fax_jobs (+ their first transition), which is exactly
// where the design keeps far-future faxes. The database is dropped at the end.
//
//   npm run bench:scheduling            (about 5 minutes; writes bench/results/scheduling.{json,md})
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import pg from 'pg';
import { call, seedAccount, tokenFor } from '../test/support/client.ts';
import { startService } from '../test/support/harness.ts';
import { makePdfBase64 } from '../test/support/pdf.ts';

const PENDING = Number(process.env.BENCH_PENDING ?? 1_000_000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 400);
const WINDOW_S = 30; // near window for the run (default 120; smaller keeps the run short)
const PROMOTE_S = 5;

const env = {
  LOG_LEVEL: 'warn',
  SCHEDULE_NEAR_WINDOW_SECONDS: String(WINDOW_S),
  SCHEDULE_PROMOTE_SECONDS: String(PROMOTE_S),
  SCHEDULE_POLL_MS: '100',
  OUTBOX_SWEEP_SECONDS: '10',
};

type Stats = { n: number; p50: number; p99: number; max: number; mean: number };
function stats(xs: number[]): Stats {
  const a = [...xs].sort((x, y) => x - y);
  const at = (q: number) => a[Math.min(a.length - 1, Math.max(0, Math.ceil(q * a.length) - 1))] ?? NaN;
  const r = (v: number) => Math.round(v * 100) / 100;
  return {
    n: a.length,
    p50: r(at(0.5)),
    p99: r(at(0.99)),
    max: r(a[a.length - 1] ?? NaN),
    mean: r(a.reduce((s, v) => s + v, 0) / (a.length || 1)),
  };
}

// Deployed shape: the API with the send and cancel workers in this process, the scheduler in its own
// process (`npm run worker:scheduler`), so that fired faxes' document work does not share its event loop.
const s = await startService({ env, components: ['api', 'send', 'cancel'] });
const db = new pg.Pool({ connectionString: s.cfg.DATABASE_URL, max: 2 });
const log = (m: string) => process.stdout.write(`[${new Date().toISOString()}] ${m}\n`);
const schedulerProc = spawn(
  process.execPath,
  [new URL('../workers/scheduler.ts', import.meta.url).pathname],
  {
    env: {
      ...process.env,
      ...env,
      DATABASE_URL: s.cfg.DATABASE_URL,
      AMQP_URL: s.cfg.AMQP_URL,
      QUEUE_PREFIX: s.cfg.QUEUE_PREFIX,
      PGBOSS_SCHEMA: s.cfg.PGBOSS_SCHEMA,
      METRICS_PORT: '0',
      HOST: '127.0.0.1',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  },
);

try {
  const seed = await seedAccount(s);
  const token = await tokenFor(s.url, seed.api_key);
  const file_data = await makePdfBase64(1);

  const send = async (at: number): Promise<[string, number]> => {
    const t0 = performance.now();
    const r = await call(s.url, 'POST', '/v1/faxes/send', {
      token,
      body: {
        fax_number: '+15551234567',
        fax_data: [{ file_name: 'a.pdf', file_data }],
        scheduled_date: new Date(at).toISOString(),
      },
    });
    const ms = performance.now() - t0;
    if (r.http !== 200) throw new Error(`send: ${r.http} ${JSON.stringify(r.body)}`);
    return [r.body.data.job_id as string, ms];
  };
  const cancel = async (id: string): Promise<number> => {
    const t0 = performance.now();
    const r = await call(s.url, 'POST', '/v1/faxes/cancel-schedule', { token, body: { job_id: id } });
    const ms = performance.now() - t0;
    if (r.http !== 200) throw new Error(`cancel: ${r.http} ${JSON.stringify(r.body)}`);
    return ms;
  };

  /** One measured phase: intake and cancel latency, then lateness of faxes falling due. */
  const phase = async (name: string) => {
    log(`${name}: send + cancel latency (${SAMPLES} each, sequential)`);
    const day = 86_400_000;
    const sendMs: number[] = [];
    const ids: string[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const [id, ms] = await send(Date.now() + day + Math.random() * 79 * day);
      ids.push(id);
      sendMs.push(ms);
    }
    const cancelMs: number[] = [];
    for (const id of ids) cancelMs.push(await cancel(id));

    log(`${name}: lateness (near tier, promoted far tier, and a burst of 100 due at one instant)`);
    const t0 = Date.now();
    const due: { at: number; tier: 'near' | 'far' | 'burst' }[] = [];
    for (let i = 0; i < 100; i++) due.push({ at: t0 + 20_000 + Math.random() * 15_000, tier: 'near' });
    for (let i = 0; i < 100; i++)
      due.push({ at: t0 + (WINDOW_S + 15) * 1000 + Math.random() * 15_000, tier: 'far' });
    const burstAt = t0 + (WINDOW_S + 35) * 1000;
    for (let i = 0; i < 100; i++) due.push({ at: burstAt, tier: 'burst' });
    const nearSendMs: number[] = [];
    const lateIds: { id: string; tier: string }[] = [];
    for (let i = 0; i < due.length; i += 4) {
      await Promise.all(
        due.slice(i, i + 4).map(async (d) => {
          const [id, ms] = await send(d.at);
          if (d.tier === 'near') nearSendMs.push(ms);
          lateIds.push({ id, tier: d.tier });
        }),
      );
    }
    if (Date.now() > t0 + 20_000) throw new Error(`intake of the lateness set took ${Date.now() - t0} ms`);
    const idList = lateIds.map((x) => x.id);
    const deadline = Date.now() + (WINDOW_S + 60) * 1000;
    for (;;) {
      const r = await db.query<{ n: string }>(
        `SELECT count(*) AS n FROM fax_jobs WHERE id = ANY($1::uuid[]) AND state = 'scheduled'`,
        [idList],
      );
      if (Number(r.rows[0]!.n) === 0) break;
      if (Date.now() > deadline) throw new Error(`${r.rows[0]!.n} faxes never left scheduled`);
      await new Promise((res) => setTimeout(res, 1000));
    }
    const late = await db.query<{ id: string; ms: number }>(
      `SELECT j.id, EXTRACT(EPOCH FROM (t.at - j.scheduled_at)) * 1000 AS ms
         FROM fax_jobs j JOIN fax_job_transitions t ON t.job_id = j.id
        WHERE j.id = ANY($1::uuid[]) AND t.from_state = 'scheduled' AND t.to_state = 'accepted'`,
      [idList],
    );
    const byId = new Map(late.rows.map((r) => [r.id, Number(r.ms)]));
    const tierOf = (t: string) => lateIds.filter((x) => x.tier === t).map((x) => byId.get(x.id)!);
    const all = lateIds.map((x) => byId.get(x.id)!);
    return {
      send_far_ms: stats(sendMs),
      send_near_ms: stats(nearSendMs),
      cancel_ms: stats(cancelMs),
      lateness_ms: stats(all),
      lateness_near_ms: stats(tierOf('near')),
      lateness_promoted_ms: stats(tierOf('far')),
      lateness_burst_ms: stats(tierOf('burst')),
      early: all.filter((v) => v < 0).length,
    };
  };

  log('warm-up');
  for (let i = 0; i < 50; i++) await cancel((await send(Date.now() + 86_400_000 * 2))[0]);

  const empty = await phase('empty');

  log(`loading ${PENDING} scheduled faxes (due in 1-89 days) with SQL`);
  const loadT0 = Date.now();
  await db.query(`INSERT INTO accounts (name) SELECT 'bench ' || g FROM generate_series(1, 99) g`);
  const CHUNK = 200_000;
  for (let done = 0; done < PENDING; done += CHUNK) {
    const n = Math.min(CHUNK, PENDING - done);
    await db.query(
      `WITH a AS (SELECT array_agg(id) AS ids, count(*) AS n FROM accounts),
            j AS (
              INSERT INTO fax_jobs (id, account_id, kind, state, fax_number, caller_id, fax_quality,
                                    fax_priority, scheduled_at, options, dispatched_at)
              SELECT gen_random_uuid(), a.ids[1 + (g % a.n)], 'send', 'scheduled',
                     '+1555' || lpad((g % 10000000)::text, 7, '0'), '+15550100001', 'standard', 'regular',
                     now() + interval '1 day' + random() * interval '88 days', '{}'::jsonb, now()
                FROM generate_series(1, $1::int) g, a
              RETURNING id, account_id)
       INSERT INTO fax_job_transitions (job_id, account_id, from_state, to_state)
       SELECT id, account_id, NULL, 'scheduled' FROM j`,
      [n],
    );
    log(`  ${done + n}`);
  }
  await db.query('VACUUM ANALYZE fax_jobs');
  await db.query('VACUUM ANALYZE fax_job_transitions');
  const loadSeconds = (Date.now() - loadT0) / 1000;
  const t1 = performance.now();
  const countRow = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM fax_jobs WHERE state = 'scheduled' AND scheduled_at IS NOT NULL`,
  );
  const pendingCountMs = performance.now() - t1;
  const t2 = performance.now();
  await db.query(
    `SELECT id FROM fax_jobs WHERE state = 'scheduled' AND schedule_ref IS NULL
        AND scheduled_at < now() + make_interval(secs => $1) ORDER BY scheduled_at LIMIT 1000`,
    [WINDOW_S],
  );
  const promoteQueryMs = performance.now() - t2;
  log(`loaded in ${loadSeconds.toFixed(1)} s; pending now ${countRow.rows[0]!.n}`);

  const loaded = await phase('loaded');

  const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
  const result = {
    when: new Date().toISOString(),
    command: 'npm run bench:scheduling',
    machine: { cpus: os.cpus().length, loadavg_at_end: os.loadavg().map((v) => Math.round(v * 100) / 100) },
    config: { ...env, samples: SAMPLES, pending: PENDING },
    load_seconds: loadSeconds,
    pending_count: Number(countRow.rows[0]!.n),
    pending_count_query_ms: Math.round(pendingCountMs * 10) / 10,
    promote_query_ms_with_pending: Math.round(promoteQueryMs * 10) / 10,
    empty,
    loaded,
    checks: {
      lateness_p99_le_500ms: loaded.lateness_ms.p99 <= 500 && empty.lateness_ms.p99 <= 500,
      send_p99_ratio: ratio(loaded.send_far_ms.p99, empty.send_far_ms.p99),
      send_near_p99_ratio: ratio(loaded.send_near_ms.p99, empty.send_near_ms.p99),
      cancel_p99_ratio: ratio(loaded.cancel_ms.p99, empty.cancel_ms.p99),
    },
  };
  await mkdir(new URL('./results/', import.meta.url), { recursive: true });
  await writeFile(
    new URL('./results/scheduling.json', import.meta.url),
    JSON.stringify(result, null, 2) + '\n',
  );
  const row = (label: string, e: Stats, l: Stats) =>
    `| ${label} | ${e.p50} / ${e.p99} / ${e.max} | ${l.p50} / ${l.p99} / ${l.max} |`;
  const md = [
    `# Scheduled faxes benchmark (${result.when})`,
    '',
    `Command: \`npm run bench:scheduling\`. ${os.cpus().length} CPUs shared with other work (load average ${result.machine.loadavg_at_end.join(', ')} at the end), PostgreSQL and RabbitMQ local; API + send/cancel workers in one process, the scheduler in another.`,
    `Pending in the loaded run: ${result.pending_count} (bulk load ${loadSeconds.toFixed(0)} s).`,
    '',
    '| ms (p50 / p99 / max) | none pending | 1,000,000 pending |',
    '|---|---|---|',
    row('send, due in 1-80 days (far tier)', empty.send_far_ms, loaded.send_far_ms),
    row('send, due within the window (near tier; 4 in flight)', empty.send_near_ms, loaded.send_near_ms),
    row('cancel', empty.cancel_ms, loaded.cancel_ms),
    row('lateness, all 300', empty.lateness_ms, loaded.lateness_ms),
    row('lateness, near tier', empty.lateness_near_ms, loaded.lateness_near_ms),
    row('lateness, promoted from far tier', empty.lateness_promoted_ms, loaded.lateness_promoted_ms),
    row('lateness, burst of 100 at one instant', empty.lateness_burst_ms, loaded.lateness_burst_ms),
    '',
    `p99 ratio loaded/empty: send ${result.checks.send_p99_ratio}, near send ${result.checks.send_near_p99_ratio}, cancel ${result.checks.cancel_p99_ratio}.`,
    `With 1,000,000 pending: promoter query ${result.promote_query_ms_with_pending} ms, pending count ${result.pending_count_query_ms} ms.`,
    '',
  ].join('\n');
  await writeFile(new URL('./results/scheduling.md', import.meta.url), md);
  process.stdout.write(md);
} finally {
  schedulerProc.kill('SIGTERM');
  if (schedulerProc.exitCode === null) await once(schedulerProc, 'exit');
  await db.end();
  await s.dropAll();
}
