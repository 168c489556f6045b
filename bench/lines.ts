// Benchmark (not a test): the line stage of one worker process.
//  1. 5,000 calls in progress at once on the simulated line in REAL time (SIM_SPEEDUP 1): event-loop
//     lag (p50/p99/max, perf_hooks.monitorEventLoopDelay) and RSS, against the same process idle.
//  2. Pipeline throughput with a zero-time line (SIM_SPEEDUP 0): N jobs accepted → delivered through
//     RabbitMQ, the send worker and the line caller; the accepted → queued rate of the same run
//     is the baseline (the part before the line).
// Needs the local PostgreSQL and RabbitMQ. Usage: npm run bench:lines [-- calls=5000 jobs=2000 hold=30]
import { writeFileSync, mkdirSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { Broker } from '../src/amqp/broker.ts';
import { start } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { migrate } from '../src/db/migrate.ts';
import { createLogger } from '../src/log.ts';
import { createMetrics } from '../src/metrics/registry.ts';
import { LineCaller } from '../src/lines/caller.ts';
import { lineOptions } from '../src/lines/options.ts';
import { SimulatedLine } from '../src/transmission/simulated.ts';
import { insertJob } from '../src/jobs/repo.ts';
import { PDFDocument } from 'pdf-lib';
import { jobFixture } from '../test/support/jobs.ts';

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.split('=') as [string, string]));
const CALLS = Number(args.calls ?? 5000);
const JOBS = Number(args.jobs ?? 2000);
const HOLD_S = Number(args.hold ?? 30);
const PAGES = 5; // 5 standard pages: about 83 s of line time per call
const ADMIN = process.env.BENCH_PG_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const AMQP = process.env.BENCH_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const log = createLogger('warn');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function withDatabase<T>(fn: (url: string) => Promise<T>): Promise<T> {
  const name = `faxline_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const u = new URL(ADMIN);
  u.pathname = `/${name}`;
  try {
    return await fn(u.toString());
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
}

const RESOLUTION_MS = 10;
/** The histogram records the time between samples; lag is that minus the sampling interval. */
function lagStats(h: ReturnType<typeof monitorEventLoopDelay>) {
  const ms = (ns: number) => Math.max(0, Math.round((ns / 1e6 - RESOLUTION_MS) * 100) / 100);
  return { p50_ms: ms(h.percentile(50)), p99_ms: ms(h.percentile(99)), max_ms: ms(h.max) };
}

const rssMb = () => Math.round(process.memoryUsage().rss / 1048576);

async function concurrentCalls() {
  return withDatabase(async (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 20 });
    pool.on('error', () => undefined);
    await migrate(pool);
    const account = randomUUID();
    await pool.query(`INSERT INTO accounts (id, name) VALUES ($1, 'bench')`, [account]);
    await pool.query(
      `INSERT INTO fax_jobs (id, account_id, kind, state, fax_number, caller_id, fax_quality, fax_priority,
                             ready_at, page_bytes, page_count)
       SELECT gen_random_uuid(), $1, 'send', 'queued', '+1555' || lpad(g::text, 7, '0'), '+15550100001',
              'standard', 'regular', now(), array_fill(19000, ARRAY[$3::int]), $3
         FROM generate_series(1, $2) g`,
      [account, CALLS, PAGES],
    );
    await pool.query('ANALYZE fax_jobs');

    const idle = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
    idle.enable();
    await sleep(3000);
    idle.disable();
    const baseline = { ...lagStats(idle), rss_mb: rssMb() };

    const cfg = loadConfig({ LINES: String(CALLS), WORKER_MAX_CALLS: String(CALLS), LINE_POLL_MS: '200' });
    const line = new SimulatedLine(1);
    const lines = new LineCaller({
      db: pool,
      backend: line,
      log,
      metrics: createMetrics('bench'),
      opts: lineOptions(cfg),
    });
    const ramp = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
    ramp.enable();
    const t0 = Date.now();
    lines.start();
    while (lines.callsInProgress < CALLS) {
      if (Date.now() - t0 > 60_000) throw new Error(`only ${lines.callsInProgress} calls after 60 s`);
      await sleep(100);
    }
    ramp.disable();
    const rampSeconds = (Date.now() - t0) / 1000;
    const hold = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
    hold.enable();
    let peakRss = 0;
    let minCalls = CALLS;
    const until = Date.now() + HOLD_S * 1000;
    while (Date.now() < until) {
      await sleep(250);
      peakRss = Math.max(peakRss, rssMb());
      minCalls = Math.min(minCalls, line.peak === 0 ? 0 : lines.callsInProgress);
    }
    hold.disable();
    const pages = (
      await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM fax_job_transitions WHERE to_state = 'sending'`,
      )
    ).rows[0]?.n;
    await lines.stop(0);
    await pool.end();
    return {
      calls: CALLS,
      pages_per_call: PAGES,
      line_time_per_call_s:
        SimulatedLine.lineTimeMs({ faxNumber: '+15551234567', pageBytes: Array(PAGES).fill(19000) }) / 1000,
      baseline_idle: baseline,
      ramp_up: { seconds: rampSeconds, ...lagStats(ramp) },
      all_calls_in_progress: {
        seconds: HOLD_S,
        min_calls_in_progress: minCalls,
        ...lagStats(hold),
        peak_rss_mb: peakRss,
        progress_transitions_recorded: pages,
      },
    };
  });
}

async function throughput() {
  return withDatabase(async (url) => {
    const prefix = `bench_${randomBytes(4).toString('hex')}`;
    const cfg = loadConfig({
      DATABASE_URL: url,
      AMQP_URL: AMQP,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      METRICS_PORT: '0',
      HOST: '127.0.0.1',
      SIM_SPEEDUP: '0',
      LINES: '1000',
      LINE_POLL_MS: '50',
      SEND_PREFETCH: '64',
      DB_POOL_SIZE: '20',
      LOG_LEVEL: 'warn',
    });
    const running = await start(cfg, { components: ['send'], log });
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => undefined);
    const broker = new Broker({ url: AMQP, prefix, queueType: 'quorum', deliveryLimit: 5 }, log);
    try {
      await broker.start();
      const account = randomUUID();
      await pool.query(`INSERT INTO accounts (id, name) VALUES ($1, 'bench')`, [account]);
      const doc = await PDFDocument.create();
      doc.addPage([612, 792]);
      const pdf = Buffer.from(await doc.save());
      const ids: string[] = [];
      for (let i = 0; i < JOBS; i++) {
        const id = randomUUID();
        ids.push(id);
        await insertJob(
          pool,
          jobFixture(account, { id, faxNumber: `+1555${String(i).padStart(7, '0')}`, dispatched: true }),
          [{ fileName: 'p.pdf', fileUrl: null, content: pdf }],
        );
      }
      await pool.query('ANALYZE fax_jobs');
      const t0 = Date.now();
      await Promise.all(
        ids.map((id) =>
          broker.publish(broker.names.commands, 'send', {
            version: 1,
            type: 'send',
            job_id: id,
            account_id: account,
            issued_at: new Date().toISOString(),
          }),
        ),
      );
      for (;;) {
        const r = await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM fax_jobs WHERE state = 'delivered'`,
        );
        if ((r.rows[0]?.n ?? 0) >= JOBS) break;
        if (Date.now() - t0 > 300_000) throw new Error('not all delivered within 300 s');
        await sleep(100);
      }
      const t = await pool.query<{ queued_s: number; delivered_s: number }>(
        `SELECT extract(epoch FROM max(at) FILTER (WHERE to_state = 'queued') - to_timestamp($1 / 1000.0))::float AS queued_s,
                extract(epoch FROM max(at) FILTER (WHERE to_state = 'delivered') - to_timestamp($1 / 1000.0))::float AS delivered_s
           FROM fax_job_transitions`,
        [t0],
      );
      const row = t.rows[0]!;
      return {
        jobs: JOBS,
        line: 'simulated, SIM_SPEEDUP 0',
        accepted_to_queued_per_second_baseline: Math.round(JOBS / row.queued_s),
        accepted_to_delivered_per_second: Math.round(JOBS / row.delivered_s),
        seconds: Math.round(row.delivered_s * 10) / 10,
      };
    } finally {
      await broker.close();
      await running.stop();
      await pool.end();
      const conn = await import('amqplib').then((m) => m.default.connect(AMQP));
      const ch = await conn.createChannel();
      for (const q of ['send', 'forward', 'cancel'])
        for (const n of [`${prefix}.cmd.${q}`, `${prefix}.cmd.${q}.dead`]) await ch.deleteQueue(n);
      for (const x of ['commands', 'dead-letter', 'events']) await ch.deleteExchange(`${prefix}.${x}`);
      await conn.close();
    }
  });
}

const which = args.only;
const results: Record<string, unknown> = { at: new Date().toISOString(), node: process.version };
if (!which || which === 'calls') results.concurrent_calls = await concurrentCalls();
if (!which || which === 'throughput') results.pipeline_throughput = await throughput();
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL('./results/lines.json', import.meta.url), JSON.stringify(results, null, 2) + '\n');
console.log(JSON.stringify(results, null, 2));
process.exit(0);
