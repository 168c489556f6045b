// Benchmark (not a test): the cost of Prometheus metrics on the intake path.
//
// Two API processes run side by side on the same database and queues, one with metrics on (and
// scraped every BENCH_SCRAPE_MS, default 15 s as in deploy/prometheus), one with
// METRICS_ENABLED=false (every metric a no-op). Rounds alternate between them in ABBA order so drift
// (a growing table, a neighbour's load) falls on both equally; each round drives POST /v1/faxes/send
// with a one-page PDF from N concurrent clients for a fixed time. Reported per variant: throughput,
// latency, and the API process's CPU time per request (read from /proc, so the same for both).
//
//   npm run bench:metrics            (defaults: 16 clients, 6 rounds of 8 s per variant)
//   BENCH_CLIENTS=32 BENCH_ROUNDS=4 BENCH_SECONDS=10 BENCH_SCRAPE_MS=1000 npm run bench:metrics
import amqp from 'amqplib';
import { readFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { topologyNames } from '../src/amqp/topology.ts';
import { call, seedAccount, tokenFor } from '../test/support/client.ts';
import { AMQP_URL, createDatabase, deleteTopology, uniqueName } from '../test/support/harness.ts';
import type { TestService } from '../test/support/harness.ts';
import { makePdfBase64 } from '../test/support/pdf.ts';
import { startProcess, type Proc } from '../test/support/process.ts';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 16);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const SCRAPE_MS = Number(process.env.BENCH_SCRAPE_MS ?? 15_000); // deploy/prometheus scrapes every 15 s

type Variant = 'on' | 'off';

function cpuSeconds(pid: number): number {
  // /proc/<pid>/stat fields 14 and 15: utime and stime in clock ticks (100 per second on Linux).
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

async function main() {
  const db = await createDatabase();
  const prefix = uniqueName('bm').toLowerCase();
  const procs: Partial<Record<Variant, Proc>> = {};
  const base = {
    DATABASE_URL: db.url,
    AMQP_URL,
    QUEUE_PREFIX: prefix,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    DB_POOL_SIZE: '10',
  };
  const conn = await amqp.connect(AMQP_URL);
  const ch = await conn.createChannel();
  try {
    procs.on = startProcess('src/api-main.ts', { ...base, LOG_LEVEL: 'info', METRICS_ENABLED: 'true' });
    const urlOn = (JSON.parse(await procs.on.waitFor(/"msg":"faxline started"/)) as { address: string })
      .address;
    procs.off = startProcess('src/api-main.ts', { ...base, LOG_LEVEL: 'info', METRICS_ENABLED: 'false' });
    const urlOff = (JSON.parse(await procs.off.waitFor(/"msg":"faxline started"/)) as { address: string })
      .address;
    const urls: Record<Variant, string> = { on: urlOn, off: urlOff };

    const seed = await seedAccount({ cfg: { DATABASE_URL: db.url } } as TestService);
    const token = await tokenFor(urlOn, seed.api_key);
    const body = {
      fax_number: '+15551230000',
      fax_data: [{ file_name: 'bench.pdf', file_data: await makePdfBase64(1) }],
    };
    const sendQueue = topologyNames(prefix).queue('send');

    const round = async (v: Variant, seconds: number) => {
      const url = urls[v];
      const pid = procs[v]!.child.pid!;
      const latencies: number[] = [];
      let errors = 0;
      const until = Date.now() + seconds * 1000;
      const cpu0 = cpuSeconds(pid);
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: CLIENTS }, async () => {
          while (Date.now() < until) {
            const s = performance.now();
            const r = await call(url, 'POST', '/v1/faxes/send', { token, body });
            if (r.http === 200) latencies.push(performance.now() - s);
            else errors++;
          }
        }),
      );
      const elapsed = (performance.now() - t0) / 1000;
      const cpu = cpuSeconds(pid) - cpu0;
      await ch.purgeQueue(sendQueue); // nobody consumes in this bench; keep the broker small
      latencies.sort((a, b) => a - b);
      return {
        variant: v,
        requests: latencies.length,
        errors,
        seconds: elapsed,
        throughput: latencies.length / elapsed,
        p50_ms: quantile(latencies, 0.5),
        p99_ms: quantile(latencies, 0.99),
        cpu_ms_per_request: (cpu * 1000) / Math.max(1, latencies.length),
      };
    };

    // Prometheus scrapes the process with metrics on at a steady interval, whichever round runs.
    let scraping = true;
    const scraper = (async () => {
      while (scraping) {
        await fetch(`${urls.on}/metrics`).then((r) => r.text());
        const next = Date.now() + SCRAPE_MS;
        while (scraping && Date.now() < next) await new Promise((r) => setTimeout(r, 50));
      }
    })();

    // Warm-up (JIT, connection pools, caches), not recorded.
    await round('on', 3);
    await round('off', 3);
    const order: Variant[] = [];
    for (let i = 0; i < ROUNDS; i++)
      order.push(...((i % 2 === 0 ? ['on', 'off'] : ['off', 'on']) as Variant[]));
    const results: Awaited<ReturnType<typeof round>>[] = [];
    for (const v of order) {
      const r = await round(v, SECONDS);
      results.push(r);
      process.stderr.write(
        `${v.padEnd(3)} ${r.throughput.toFixed(0)} req/s  p50 ${r.p50_ms.toFixed(1)} ms  p99 ${r.p99_ms.toFixed(1)} ms  cpu ${r.cpu_ms_per_request.toFixed(3)} ms/req  errors ${r.errors}\n`,
      );
    }
    scraping = false;
    await scraper;
    const summary = (v: Variant) => {
      const rs = results.filter((r) => r.variant === v);
      const req = rs.reduce((n, r) => n + r.requests, 0);
      const sec = rs.reduce((n, r) => n + r.seconds, 0);
      return {
        throughput: req / sec,
        p50_ms: rs.reduce((n, r) => n + r.p50_ms, 0) / rs.length,
        p99_ms: rs.reduce((n, r) => n + r.p99_ms, 0) / rs.length,
        cpu_ms_per_request: rs.reduce((n, r) => n + r.cpu_ms_per_request * r.requests, 0) / req,
        errors: rs.reduce((n, r) => n + r.errors, 0),
      };
    };
    const on = summary('on');
    const off = summary('off');
    const out = {
      bench: 'metrics-intake',
      date: new Date().toISOString(),
      command: `${['BENCH_CLIENTS', 'BENCH_ROUNDS', 'BENCH_SECONDS', 'BENCH_SCRAPE_MS']
        .filter((k) => process.env[k])
        .map((k) => `${k}=${process.env[k]} `)
        .join('')}npm run bench:metrics`,
      clients: CLIENTS,
      rounds_per_variant: ROUNDS,
      seconds_per_round: SECONDS,
      scrape_interval_ms_when_on: SCRAPE_MS,
      on,
      off,
      throughput_cost_percent: ((off.throughput - on.throughput) / off.throughput) * 100,
      cpu_cost_percent: ((on.cpu_ms_per_request - off.cpu_ms_per_request) / off.cpu_ms_per_request) * 100,
      target: 'throughput cost < 5%',
      rounds: results,
    };
    mkdirSync('bench/results', { recursive: true });
    const file = `bench/results/metrics-intake${SCRAPE_MS === 15_000 ? '' : `-scrape-${SCRAPE_MS}ms`}.json`;
    writeFileSync(file, JSON.stringify(out, null, 2) + '\n');
    process.stdout.write(
      `metrics on : ${on.throughput.toFixed(0)} req/s, p50 ${on.p50_ms.toFixed(1)} ms, p99 ${on.p99_ms.toFixed(1)} ms, ${on.cpu_ms_per_request.toFixed(3)} ms CPU/request\n` +
        `metrics off: ${off.throughput.toFixed(0)} req/s, p50 ${off.p50_ms.toFixed(1)} ms, p99 ${off.p99_ms.toFixed(1)} ms, ${off.cpu_ms_per_request.toFixed(3)} ms CPU/request\n` +
        `throughput cost of metrics: ${out.throughput_cost_percent.toFixed(1)}%  (API CPU per request: ${out.cpu_cost_percent.toFixed(1)}%)\n` +
        `written to ${file}\n`,
    );
  } finally {
    for (const p of Object.values(procs)) if (p && p.child.exitCode === null) p.child.kill('SIGTERM');
    await Promise.all(Object.values(procs).map((p) => p?.exited));
    await ch.close().catch(() => undefined);
    await conn.close().catch(() => undefined);
    await deleteTopology(prefix).catch(() => undefined);
    await db.drop();
  }
}

await main();
