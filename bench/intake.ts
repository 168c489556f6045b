// Intake benchmark (not a test): POST /v1/faxes/send with a small Base64 PDF under load, next to a
// trivial route (GET /healthz) of the same server, in the same run, with the same load generator
// (autocannon, 100 connections, loopback). Every 2xx send must correspond to a job committed in
// PostgreSQL and a command confirmed by RabbitMQ (checked after the run). Writes
// bench/results/intake.json and intake.md.
//
//   npm run bench:intake            (BENCH_SECONDS=10 BENCH_CONNECTIONS=100 by default)
import amqp from 'amqplib';
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { seedDemo } from '../src/admin/seed.ts';
import { AMQP_URL, createDatabase, deleteTopology, uniqueName } from '../test/support/harness.ts';
import { makePdfBase64 } from '../test/support/pdf.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 100);

interface Run {
  route: string;
  requests_per_second: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
  ok: number;
  non_2xx: number;
  errors: number;
}

/** user + system CPU seconds of a process from /proc (Linux; 0 when it is gone or unreadable). */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return 0;
  }
}

/** Pids of the processes whose command name is `comm` (e.g. RabbitMQ's beam.smp). */
function pidsNamed(comm: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/comm`, 'utf8').trim() === comm) out.push(Number(d));
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

function load(o: autocannon.Options): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon(o, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

function summary(route: string, r: autocannon.Result): Run {
  return {
    route,
    requests_per_second: Math.round(r['2xx'] / r.duration),
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    max_ms: r.latency.max,
    ok: r['2xx'],
    non_2xx: r.non2xx,
    errors: r.errors + r.timeouts,
  };
}

// BENCH_TRACING=1: the API exports its spans (OTLP protobuf) to a sink in this process that only
// counts them, so the cost of tracing on is measured with the exporter really sending.
let spansReceived = 0;
const sink = process.env.BENCH_TRACING === '1' ? await otlpSink() : null;

async function otlpSink(): Promise<{ url: string; close(): void }> {
  const server = http.createServer((req, res) => {
    req.on('data', () => undefined);
    req.on('end', () => {
      spansReceived++;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}

const db = await createDatabase();
const prefix = uniqueName('bench').toLowerCase();
const profile = process.env.BENCH_PROFILE
  ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE}`]
  : [];
const child = spawn(process.execPath, [...profile, 'bench/intake-server.ts'], {
  env: {
    ...process.env,
    DATABASE_URL: db.url,
    AMQP_URL,
    QUEUE_PREFIX: prefix,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    RATE_LIMIT_PER_SECOND: '0',
    ...(sink ? { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' } : {}),
  },
  stdio: ['ignore', 'pipe', 'inherit'],
});
try {
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`server exited ${code}`)));
    createInterface({ input: child.stdout! }).once('line', (l) =>
      resolve((JSON.parse(l) as { url: string }).url),
    );
  });
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  await c.query('BEGIN');
  const seed = await seedDemo(c);
  await c.query('COMMIT');
  const auth = await fetch(`${url}/v1/auth`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_secret_key: seed.api_key }),
  });
  const token = ((await auth.json()) as { data: { access_token: string } }).data.access_token;
  const pdf = await makePdfBase64(1);
  const body = JSON.stringify({
    fax_number: '+15551234567',
    fax_data: [{ file_name: 'letter.pdf', file_data: pdf }],
  });
  const sendOpts: autocannon.Options = {
    url: `${url}/v1/faxes/send`,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body,
    connections: CONNECTIONS,
  };
  const trivialOpts: autocannon.Options = { url: `${url}/healthz`, connections: CONNECTIONS };

  // Warm up both paths (JIT, pools, prepared plans), then measure them one after the other.
  await load({ ...trivialOpts, duration: 2 });
  await load({ ...sendOpts, duration: 3 });
  const before = (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM fax_jobs')).rows[0]!.n;
  const commits0 = (
    await c.query<{ n: string }>(
      'SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()',
    )
  ).rows[0]!.n;
  // CPU time each party spent during a measured run, per answered request: the API process, this
  // process (the load generator), the PostgreSQL backends of the bench database (those alive at both
  // ends of the run) and RabbitMQ (shared: it includes whatever else used the broker meanwhile).
  const backends = async () =>
    (
      await c.query<{ pid: number }>(
        'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
      )
    ).rows.map((r) => r.pid);
  const cpuNow = async () => {
    const pids = await backends();
    return {
      pids,
      api: cpuSeconds(child.pid!),
      load_generator: (process.cpuUsage().user + process.cpuUsage().system) / 1e6,
      rabbitmq: pidsNamed('beam.smp').reduce((a, p) => a + cpuSeconds(p), 0),
      backends: new Map(pids.map((p) => [p, cpuSeconds(p)])),
    };
  };
  const cpu: Record<string, Record<string, number>> = {};
  const measured = async (label: string, o: autocannon.Options): Promise<Run> => {
    const a = await cpuNow();
    const r = summary(label, await load(o));
    const b = await cpuNow();
    let pgBench = 0;
    for (const [pid, s] of b.backends) pgBench += s - (a.backends.get(pid) ?? 0);
    const per = (x: number) => Number(((x * 1000) / Math.max(1, r.ok)).toFixed(3));
    const parts = {
      api: b.api - a.api,
      load_generator: b.load_generator - a.load_generator,
      postgres_bench_backends: pgBench,
      rabbitmq: b.rabbitmq - a.rabbitmq,
    };
    cpu[`${label} @${o.connections}`] = Object.fromEntries(
      Object.entries(parts).map(([k, v]) => [`${k}_ms_per_request`, per(v)]),
    );
    return r;
  };
  const trivial = await measured('GET /healthz', { ...trivialOpts, duration: SECONDS });
  const send = await measured('POST /v1/faxes/send', { ...sendOpts, duration: SECONDS });
  // The issue's target read as a service level: send sustains 10% of the trivial route's rate, offered
  // at that fixed rate over the same 100 connections, with p99 under 100 ms. (The saturation run above
  // cannot show that: with 100 connections always busy, its mean latency is 100 / throughput.)
  const targetRate = Math.ceil(0.1 * trivial.requests_per_second);
  const atTarget = await measured('POST /v1/faxes/send at 10% of the trivial rate', {
    ...sendOpts,
    overallRate: targetRate,
    duration: SECONDS,
  });
  // The same two routes at 10 connections: latency when the server is not saturated.
  const light = {
    trivial: await measured('GET /healthz', { ...trivialOpts, connections: 10, duration: SECONDS }),
    send: await measured('POST /v1/faxes/send', { ...sendOpts, connections: 10, duration: SECONDS }),
  };
  const after = (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM fax_jobs')).rows[0]!.n;
  const sentAll = send.ok + atTarget.ok + light.send.ok;
  const commits1 = (
    await c.query<{ n: string }>(
      'SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()',
    )
  ).rows[0]!.n;

  // Every accepted send is a committed job and a confirmed command on the (unconsumed) queue. Requests
  // still in flight when the load generator stopped finish first: wait until the counts settle.
  const conn = await amqp.connect(AMQP_URL);
  const ch = await conn.createChannel();
  let queued = -1;
  let total = -2;
  for (let i = 0; i < 50 && queued !== total; i++) {
    await new Promise((r) => setTimeout(r, 200));
    queued = (await ch.checkQueue(`${prefix}.cmd.send`)).messageCount;
    total = (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM fax_jobs')).rows[0]!.n;
  }
  await conn.close();
  await c.end();

  const ratio = send.requests_per_second / trivial.requests_per_second;
  const result = {
    date: new Date().toISOString(),
    command: 'npm run bench:intake',
    seconds: SECONDS,
    machine: { cpus: cpus().length, load_average_1m_at_end: Number(loadavg()[0]!.toFixed(1)) },
    connections: CONNECTIONS,
    tracing: sink
      ? { exporter: 'otlp http/protobuf to a local sink', export_requests: spansReceived }
      : 'off',
    pdf_base64_bytes: pdf.length,
    trivial,
    send,
    at_10_connections: light,
    cpu_ms_per_request: cpu,
    at_target_rate: { offered_per_second: targetRate, ...atTarget },
    ratio: Number(ratio.toFixed(3)),
    targets: { ratio_at_least: 0.1, send_p99_ms_below: 100 },
    /** Saturation: send's most, over trivial's most; and its p99 while every connection is busy. */
    met_at_saturation: ratio >= 0.1 && send.p99_ms < 100,
    /** Service level: 10% of trivial's rate offered and sustained (≥ 95% answered 2xx), p99 < 100 ms. */
    met_at_target_rate:
      atTarget.requests_per_second >= 0.95 * targetRate && atTarget.non_2xx === 0 && atTarget.p99_ms < 100,
    checks: {
      jobs_committed_in_measured_runs: after - before,
      accepted_in_measured_runs: sentAll,
      every_accepted_job_committed: after - before >= sentAll,
      commands_on_queue: queued,
      jobs_total: total,
      every_job_has_a_confirmed_command: queued === total,
      postgres_transactions_in_measured_runs: Number(BigInt(commits1) - BigInt(commits0)),
    },
  };
  writeFileSync('bench/results/intake.json', JSON.stringify(result, null, 2) + '\n');
  const md = `# Intake benchmark

\`${result.command}\` — ${result.date}, ${CONNECTIONS} connections, ${SECONDS} s per route, loopback, autocannon;
${result.machine.cpus} CPUs, load average ${result.machine.load_average_1m_at_end} at the end of the run (shared machine).

| route | req/s | p50 ms | p99 ms | max ms | non-2xx |
|---|---|---|---|---|---|
| ${trivial.route} | ${trivial.requests_per_second} | ${trivial.p50_ms} | ${trivial.p99_ms} | ${trivial.max_ms} | ${trivial.non_2xx} |
| ${send.route} | ${send.requests_per_second} | ${send.p50_ms} | ${send.p99_ms} | ${send.max_ms} | ${send.non_2xx} |
| ${atTarget.route} (${targetRate}/s offered) | ${atTarget.requests_per_second} | ${atTarget.p50_ms} | ${atTarget.p99_ms} | ${atTarget.max_ms} | ${atTarget.non_2xx} |
| ${light.trivial.route}, 10 connections | ${light.trivial.requests_per_second} | ${light.trivial.p50_ms} | ${light.trivial.p99_ms} | ${light.trivial.max_ms} | ${light.trivial.non_2xx} |
| ${light.send.route}, 10 connections | ${light.send.requests_per_second} | ${light.send.p50_ms} | ${light.send.p99_ms} | ${light.send.max_ms} | ${light.send.non_2xx} |

At saturation (${CONNECTIONS} connections always busy): send / trivial **${(ratio * 100).toFixed(1)}%**, send p99 ${send.p99_ms} ms (≥ 10% with p99 < 100 ms: ${result.met_at_saturation ? 'met' : 'NOT met'}).
At 10% of the trivial rate offered over ${CONNECTIONS} connections (${targetRate}/s): ${atTarget.requests_per_second}/s answered, p99 ${atTarget.p99_ms} ms (sustained with p99 < 100 ms: ${result.met_at_target_rate ? 'met' : 'NOT met'}).
Accepted sends ${sentAll}, jobs committed meanwhile ${after - before} (requests still in flight at the end
are committed too); commands confirmed on the queue ${queued} for ${total} jobs in all.
PostgreSQL transactions during both measured runs: ${result.checks.postgres_transactions_in_measured_runs}.

CPU ms per answered request (user + system, from /proc; RabbitMQ's includes anything else that
used the shared broker meanwhile):

| run | API | load generator | PostgreSQL (bench backends) | RabbitMQ |
|---|---|---|---|---|
${Object.entries(cpu)
  .map(
    ([k, v]) =>
      `| ${k} | ${v.api_ms_per_request} | ${v.load_generator_ms_per_request} | ${v.postgres_bench_backends_ms_per_request} | ${v.rabbitmq_ms_per_request} |`,
  )
  .join('\n')}
`;
  writeFileSync('bench/results/intake.md', md);
  process.stdout.write(md);
} finally {
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
  await deleteTopology(prefix).catch(() => undefined);
  await db.drop();
  sink?.close();
}
